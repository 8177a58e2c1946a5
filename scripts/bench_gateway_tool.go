//go:build ignore

// The load generator and fast mock worker of scripts/bench_gateway.py (built by it with
// `go build scripts/bench_gateway_tool.go`; the build tag keeps it out of the module).
//
//	bench_gateway_tool worker            a worker on a free loopback port; prints its URL
//	bench_gateway_tool seq  URL N KEYS STREAM   N sequential requests, one connection; prints latencies (ns)
//	bench_gateway_tool conc URL N C KEYS        N requests from C keep-alive clients; prints req/s
//
// The worker answers the endpoints a gateway probes (SMG asks for /v1/models, /server_info,
// /get_model_info, /health) and POST /v1/completions at once: JSON, or SSE with one event per
// token and a flush after each, as an inference server does.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const model = "mock-model"

func main() {
	switch os.Args[1] {
	case "worker":
		worker()
	case "seq":
		n, _ := strconv.Atoi(os.Args[3])
		keys, _ := strconv.Atoi(os.Args[4])
		seq(os.Args[2], n, keys, os.Args[5] == "1")
	case "conc":
		n, _ := strconv.Atoi(os.Args[3])
		c, _ := strconv.Atoi(os.Args[4])
		keys, _ := strconv.Atoi(os.Args[5])
		conc(os.Args[2], n, c, keys)
	}
}

func worker() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	info := func(v any) http.HandlerFunc {
		body, _ := json.Marshal(v)
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/health_generate", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", info(map[string]any{"object": "list", "data": []any{map[string]any{"id": model, "object": "model", "owned_by": "bench", "root": model}}}))
	serverInfo := map[string]any{"model_path": model, "served_model_name": model, "tokenizer_path": model, "version": "0.0.0"}
	mux.HandleFunc("/server_info", info(serverInfo))
	mux.HandleFunc("/get_server_info", info(serverInfo))
	modelInfo := info(map[string]any{"model_path": model, "tokenizer_path": model, "is_generation": true})
	mux.HandleFunc("/model_info", modelInfo)
	mux.HandleFunc("/get_model_info", modelInfo)
	mux.HandleFunc("/v1/completions", completions)
	mux.HandleFunc("/v1/chat/completions", completions)
	mux.HandleFunc("/generate", completions)
	fmt.Printf("bench worker listening on http://%s\n", ln.Addr())
	os.Stdout.Sync()
	(&http.Server{Handler: mux}).Serve(ln)
}

func completions(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MaxTokens int  `json:"max_tokens"`
		Stream    bool `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	json.Unmarshal(body, &req)
	if req.MaxTokens <= 0 {
		req.MaxTokens = 8
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","model":%q,"choices":[{"index":0,"text":"%s","finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":%d,"total_tokens":%d}}`,
			model, strings.Repeat(" tok", req.MaxTokens), req.MaxTokens, req.MaxTokens+2)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f := w.(http.Flusher)
	for i := 0; i < req.MaxTokens; i++ {
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":%q,\"choices\":[{\"index\":0,\"text\":\" tok\",\"finish_reason\":null}]}\n\n", model)
		f.Flush()
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func request(url string, i, keys int, stream bool) *http.Request {
	body := fmt.Sprintf(`{"model":%q,"prompt":"hello world %d","max_tokens":8,"stream":%v}`, model, i, stream)
	req, _ := http.NewRequest("POST", url+"/v1/completions", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-SMG-Routing-Key", "key-"+strconv.Itoa(i%keys))
	return req
}

func newClient(conns int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
	}}
}

func do(c *http.Client, req *http.Request) error {
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil && res.StatusCode != 200 {
		err = fmt.Errorf("status %d", res.StatusCode)
	}
	return err
}

// seq sends n requests one after the other (after 20 untimed ones) and prints each latency in ns.
// URLs separated by commas are used in turn (calling the workers directly).
func seq(urls string, n, keys int, stream bool) {
	targets := strings.Split(urls, ",")
	c := newClient(len(targets))
	out := make([]string, 0, n)
	for i := -20; i < n; i++ {
		req := request(targets[(i+20)%len(targets)], i+20, keys, stream)
		begin := time.Now()
		if err := do(c, req); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if i >= 0 {
			out = append(out, strconv.FormatInt(time.Since(begin).Nanoseconds(), 10))
		}
	}
	fmt.Println(strings.Join(out, " ")) // nanoseconds
}

// conc sends n requests from c concurrent clients and prints requests per second.
func conc(urls string, n, c, keys int) {
	targets := strings.Split(urls, ",")
	client := newClient(c)
	for i := 0; i < c; i++ { // open the connections first
		do(client, request(targets[i%len(targets)], i, keys, false))
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if do(client, request(targets[i%len(targets)], i, keys, false)) != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%f %d\n", float64(n)/time.Since(begin).Seconds(), failed.Load())
}
