package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
)

func TestRoutesByRoutingKeyAsTheRouterDecides(t *testing.T) {
	var urls []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprint("w", i)
		urls = append(urls, worker(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }).URL)
	}
	r := newRouter(t, urls...)
	g := start(t, r, Options{ExposeRoutingHeaders: true})
	for i := 0; i < 40; i++ {
		key := fmt.Sprint("key-", i)
		req := core.KeyRequest([]byte(key))
		want := r.Select(&req)
		res, body := get(t, g, "/v1/completions", http.Header{"X-Smg-Routing-Key": {key}})
		if got := res.Header.Get(HeaderWorker); got != want.WorkerURL {
			t.Fatalf("key %s went to %s (body %s), router says %s", key, got, body, want.WorkerURL)
		}
		if res.Header.Get(HeaderBranch) != "explicit_routing_key_hit" {
			t.Fatalf("branch %q", res.Header.Get(HeaderBranch))
		}
	}
	if n := r.Stats().Branches[core.BranchExplicitRoutingKeyHit]; n != 40 {
		t.Fatalf("router counted %d explicit key hits, want 40", n)
	}
	waitLeases(t, r, 0)
}

func TestNoRoutingHeadersUnlessExposed(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	g := start(t, newRouter(t, w.URL), Options{})
	res, _ := get(t, g, "/", nil)
	if res.Header.Get(HeaderWorker) != "" || res.Header.Get(HeaderBranch) != "" {
		t.Fatalf("routing headers exposed: %v", res.Header)
	}
}

// blockingWorker answers nothing until the request is cancelled, and reports the cancellation.
// blockingWorker answers nothing until its request is cancelled; each request it receives is
// announced on started (a test that expects a cancellation must wait for it: a request cut
// before it reaches the worker is never cancelled there).
func blockingWorker(t *testing.T, streamFirst bool) (url string, started, cancelled chan struct{}) {
	started, cancelled = make(chan struct{}, 16), make(chan struct{}, 16)
	url = worker(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices a closed connection only once the body is read
		started <- struct{}{}
		if streamFirst {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(20 * time.Second):
		}
	}).URL
	return url, started, cancelled
}

// within fails the test unless ch delivers within 5 s.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

func TestClientDisconnectWhileWaitingForHeadersReleasesAndCancels(t *testing.T) {
	url, started, cancelled := blockingWorker(t, false)
	r := newRouter(t, url)
	g := start(t, r, Options{})
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	within(t, started, "the request did not reach the worker")
	waitLeases(t, r, 1)
	conn.Close()
	waitLeases(t, r, 0)
	within(t, cancelled, "the request to the worker was not cancelled")
}

func TestClientDisconnectMidStreamReleasesAndCancels(t *testing.T) {
	url, _, cancelled := blockingWorker(t, true)
	r := newRouter(t, url)
	g := start(t, r, Options{})
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(res.Body).ReadString('\n')
	if line != "data: first\n" {
		t.Fatalf("first event %q", line)
	}
	if leases(r) != 1 {
		t.Fatalf("%d leases while streaming, want 1", leases(r))
	}
	conn.Close()
	waitLeases(t, r, 0)
	within(t, cancelled, "the request to the worker was not cancelled")
}

func TestLeaseHeldUntilTheAnswerIsFinished(t *testing.T) {
	release := make(chan struct{})
	w := heldStream(t, release, nil)
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	res, err := client().Get("http://" + g.Addr() + "/s")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	// Flushed per event: the first one arrives while the worker holds the second.
	if line, _ := br.ReadString('\n'); line != "data: a\n" {
		t.Fatalf("first event %q", line)
	}
	if leases(r) != 1 {
		t.Fatalf("%d leases mid-answer, want 1", leases(r))
	}
	close(release)
	rest, _ := io.ReadAll(br)
	res.Body.Close()
	if string(rest) != "\ndata: b\n\n" {
		t.Fatalf("rest %q", rest)
	}
	waitLeases(t, r, 0)
	if r.Stats().Leaked != 0 {
		t.Fatal("leaked leases")
	}
}

func TestWorkerFailingMidStream(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, _ := http.NewResponseController(w).Hijack()
		buf.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		buf.Flush()
		time.Sleep(50 * time.Millisecond)
		conn.Close()
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	res, err := client().Get("http://" + g.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || string(body) != "hello" {
		t.Fatalf("a cut stream must reach the client cut: body %q, err %v", body, err)
	}
	waitLeases(t, r, 0)
}

func TestWorkerRefusingConnections(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	for _, expose := range []bool{false, true} {
		r := newRouter(t, dead)
		g := start(t, r, Options{ExposeRoutingHeaders: expose})
		res, body := get(t, g, "/v1/x", nil)
		if res.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d", res.StatusCode)
		}
		if strings.Contains(body, ln.Addr().String()) != expose {
			t.Fatalf("expose=%v: body %s", expose, body)
		}
		waitLeases(t, r, 0)
	}
}

func TestNoWorkerAvailable(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {})
	r := newRouter(t, w.URL)
	r.SetHealthy(w.URL, false)
	g := start(t, r, Options{})
	res, body := get(t, g, "/", nil)
	var e map[string]string
	json.Unmarshal([]byte(body), &e)
	if res.StatusCode != 503 || e["error"] != "no worker available" || e["branch"] != "no_healthy_workers" || strings.Contains(body, w.URL) {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
}

func TestStreamsCancelledAtRandomPointsLeaveNoLease(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(rand.Intn(3)) * time.Millisecond)
		for i := 0; i < 20; i++ {
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	rng := rand.New(rand.NewSource(14))
	var wg sync.WaitGroup
	for i := 0; i < 80; i++ {
		after := time.Duration(rng.Intn(40)) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), after)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+g.Addr()+"/v1/completions", strings.NewReader(`{"stream":true}`))
			if res, err := client().Do(req); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	waitLeases(t, r, 0)
	if ws := r.Workers(); ws[0].Load != 0 {
		t.Fatalf("worker load %d", ws[0].Load)
	}
}

func TestMembershipChangeWhileStreaming(t *testing.T) {
	release := make(chan struct{})
	a, b := heldStream(t, release, nil), heldStream(t, release, nil)
	r := newRouter(t, a.URL, b.URL)
	g := start(t, r, Options{})
	var wg sync.WaitGroup
	var complete atomic.Int32
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", "http://"+g.Addr()+"/", nil)
			req.Header.Set("X-SMG-Routing-Key", fmt.Sprint("k", i))
			res, err := client().Do(req)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(body) == "data: a\n\ndata: b\n\n" {
				complete.Add(1)
			}
		}()
	}
	waitLeases(t, r, 10)
	if err := r.RemoveWorker(a.URL); err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(a.URL); err != nil { // a new worker with the same URL
		t.Fatal(err)
	}
	close(release)
	wg.Wait()
	if complete.Load() != 10 {
		t.Fatalf("%d of 10 streams completed", complete.Load())
	}
	waitLeases(t, r, 0)
	for _, w := range r.Workers() {
		if w.Load != 0 || w.ActiveKeys != 0 {
			t.Fatalf("worker %s load %d keys %d after the streams", w.URL, w.Load, w.ActiveKeys)
		}
	}
}

func TestBadPathsRefusedBeforeRouting(t *testing.T) {
	seen := make(chan string, 64)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { seen <- r.RequestURI })
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	for _, target := range []string{
		"http://evil.example/v1/x", "*", "/v1/..%2Fadmin", "/v1/%2E%2E%2Fadmin", "/v1/x/..%2F..%2Fadmin",
		"/v1/%2e%2e/admin", "/v1/../admin", "/v1/./x", "/a%00b", "/a/%zz", "/a%2",
	} {
		method := "GET"
		if target == "*" {
			method = "OPTIONS"
		}
		res, body := raw(t, g.Addr(), method+" "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if res.StatusCode != 400 {
			t.Errorf("%s: status %d %s", target, res.StatusCode, body)
		}
	}
	if n := routed(r); n != 0 || leases(r) != 0 {
		t.Fatalf("bad paths were routed: %d routes, %d leases", n, leases(r))
	}
	if len(seen) != 0 {
		t.Fatalf("the worker saw %q", <-seen)
	}
}

func TestRawPathAndQueryForwardedByteForByte(t *testing.T) {
	seen := make(chan string, 1)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { seen <- r.RequestURI })
	g := start(t, newRouter(t, w.URL+"/base/"), Options{})
	for _, target := range []string{
		"/v1/a%2Fb?x=%3F&y", "/v1/completions%3Fx=1", "/v1/a%23y", "/v1/%7e%7E?", "/v1/a;b=c?q=a;b&&=", "/v1/%C3%A9?%zz",
	} {
		res, _ := raw(t, g.Addr(), "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if res.StatusCode != 200 {
			t.Fatalf("%s: status %d", target, res.StatusCode)
		}
		if got := <-seen; got != "/base"+target {
			t.Errorf("sent %q, the worker got %q", target, got)
		}
	}
}

func TestHopByHopHeadersRemovedBothWays(t *testing.T) {
	seen := make(chan http.Header, 1)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		h := w.Header()
		h.Set("Connection", "X-Resp-Private")
		h.Set("X-Resp-Private", "1")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("X-Resp-Normal", "1")
	})
	g := start(t, newRouter(t, w.URL), Options{})
	res, _ := raw(t, g.Addr(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Private\r\nX-Private: 1\r\n"+
		"Keep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nTe: gzip\r\nTrailer: X-T\r\nX-Normal: 1\r\n\r\n")
	in := <-seen
	for _, name := range []string{"Connection", "X-Private", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer"} {
		if _, ok := in[name]; ok {
			t.Errorf("the worker got %s: %v", name, in)
		}
	}
	if in.Get("X-Normal") != "1" {
		t.Errorf("X-Normal lost: %v", in)
	}
	for _, name := range []string{"X-Resp-Private", "Keep-Alive", "Proxy-Authenticate"} {
		if _, ok := res.Header[name]; ok {
			t.Errorf("the client got %s: %v", name, res.Header)
		}
	}
	if res.Header.Get("X-Resp-Normal") != "1" {
		t.Errorf("X-Resp-Normal lost: %v", res.Header)
	}
}

func TestForwardsOnlyTheClientsHeaders(t *testing.T) {
	seen := make(chan *http.Request, 1)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { seen <- r })
	g := start(t, newRouter(t, w.URL), Options{})
	raw(t, g.Addr(), "GET / HTTP/1.1\r\nHost: client.example\r\nConnection: close\r\n\r\n")
	in := <-seen
	for _, name := range []string{"X-Forwarded-For", "Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto", "Accept-Encoding", "User-Agent", "Cookie"} {
		if _, ok := in.Header[name]; ok {
			t.Errorf("the gateway added %s: %v", name, in.Header)
		}
	}
	raw(t, g.Addr(), "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.1.2.3\r\nForwarded: for=10.1.2.3\r\nConnection: close\r\n\r\n")
	in = <-seen
	if v := in.Header["X-Forwarded-For"]; len(v) != 1 || v[0] != "10.1.2.3" || in.Header.Get("Forwarded") != "for=10.1.2.3" {
		t.Errorf("the client's forwarding headers changed: %v", in.Header)
	}
}

func TestCookiesNeverCarriedBetweenClients(t *testing.T) {
	seen := make(chan string, 4)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Cookie")
		w.Header().Add("Set-Cookie", "a=1; Path=/")
		w.Header().Add("Set-Cookie", "b=2; Path=/")
	})
	g := start(t, newRouter(t, w.URL), Options{})
	res, _ := get(t, g, "/", nil) // client A
	if len(res.Header["Set-Cookie"]) != 2 {
		t.Fatalf("Set-Cookie not passed on: %v", res.Header)
	}
	<-seen
	for i := 0; i < 3; i++ { // client B, then A again: neither sends a cookie
		get(t, g, "/", nil)
		if c := <-seen; c != "" {
			t.Fatalf("the worker got Cookie %q from a client that sent none", c)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	got := make(chan int, 4)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- len(b)
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{MaxBodySize: 1000})
	res, _ := raw(t, g.Addr(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")
	if res.StatusCode != 413 {
		t.Fatalf("declared too large: %d", res.StatusCode)
	}
	chunk := strings.Repeat("x", 600)
	chunked := fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n%s\r\n258\r\n%s\r\n0\r\n\r\n", chunk, chunk)
	if res, _ := raw(t, g.Addr(), chunked); res.StatusCode != 413 {
		t.Fatalf("chunked too large: %d", res.StatusCode)
	}
	if routed(r) != 0 {
		t.Fatal("a refused body was routed")
	}
	req := "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n" + chunk + "\r\n0\r\n\r\n"
	if res, _ := raw(t, g.Addr(), req); res.StatusCode != 200 || <-got != 600 {
		t.Fatalf("chunked within the limit: %d", res.StatusCode)
	}
	if res, _ := raw(t, g.Addr(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("y", 1000)); res.StatusCode != 200 || <-got != 1000 {
		t.Fatalf("at the limit: %d", res.StatusCode)
	}
}

func TestSlowBodyHoldsNoLease(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234")
	time.Sleep(200 * time.Millisecond)
	if leases(r) != 0 || routed(r) != 0 {
		t.Fatalf("a request whose body is still arriving holds %d leases", leases(r))
	}
	io.WriteString(conn, "56789")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if string(body) != "0123456789" {
		t.Fatalf("body %q", body)
	}
}

func TestTimeouts(t *testing.T) {
	t.Run("body read", func(t *testing.T) {
		r := newRouter(t, worker(t, func(w http.ResponseWriter, r *http.Request) {}).URL)
		g := start(t, r, Options{BodyTimeout: 0.2})
		res, _ := raw(t, g.Addr(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01")
		if res.StatusCode != 408 || routed(r) != 0 {
			t.Fatalf("status %d, %d routed", res.StatusCode, routed(r))
		}
	})
	// Before the worker's headers: a 504 that names the option and not the worker. The timeout
	// may fire before the request reaches the worker, so nothing is asserted of the worker's
	// side here (TestClientDisconnect... do that).
	for name, c := range map[string]struct {
		opts   Options
		option string
	}{
		"first byte":                        {Options{FirstByteTimeout: 0.2}, "first_byte_timeout"},
		"whole request, before the headers": {Options{RequestTimeout: 0.2}, "request_timeout_secs"},
	} {
		t.Run(name, func(t *testing.T) {
			url, _, _ := blockingWorker(t, false)
			r := newRouter(t, url)
			g := start(t, r, c.opts)
			res, body := get(t, g, "/", nil)
			if res.StatusCode != 504 || !strings.Contains(body, c.option) || strings.Contains(body, url) {
				t.Fatalf("status %d %s", res.StatusCode, body)
			}
			waitLeases(t, r, 0)
		})
	}
	// During a stream: the stream is cut after what the worker sent, and the error log and the
	// access log say which timeout cut it (contract: HTTP proxies, step 7).
	for name, c := range map[string]struct {
		opts Options
		says string
	}{
		"idle stream":              {Options{IdleTimeout: 0.2, AccessLog: true}, "sent nothing for idle_timeout (200ms)"},
		"whole request, streaming": {Options{RequestTimeout: 0.2, AccessLog: true}, "did not end within request_timeout_secs (200ms)"},
	} {
		t.Run(name, func(t *testing.T) {
			url, _, cancelled := blockingWorker(t, true)
			r := newRouter(t, url)
			g, err := New(health.New(r, health.Options{}), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			var logs, access syncBuffer
			g.errorLog.SetOutput(&logs)
			g.accessLog = slog.New(slog.NewJSONHandler(&access, nil))
			serve(t, g)
			res, err := client().Get("http://" + g.Addr() + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			if err == nil || string(body) != "data: first\n\n" {
				t.Fatalf("the stream must be cut: %q %v", body, err)
			}
			within(t, cancelled, "the cut stream's request to the worker was not cancelled")
			waitLeases(t, r, 0) // the handler has returned: what it logs is written
			want := "worker " + url + "'s stream was cut: it " + c.says
			if !strings.Contains(logs.String(), want) {
				t.Errorf("error log %q does not say %q", logs.String(), want)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(access.String()), &line); err != nil || line["error"] != "stream cut: the worker "+c.says || line["aborted"] != true {
				t.Errorf("access log %q (%v)", access.String(), err)
			}
		})
	}
	t.Run("connect", func(t *testing.T) {
		r := newRouter(t, "http://"+unansweredListener(t))
		g := start(t, r, Options{ConnectTimeout: 0.2})
		begin := time.Now()
		res, _ := get(t, g, "/", nil)
		if res.StatusCode != 502 || time.Since(begin) > 3*time.Second {
			t.Fatalf("status %d after %v", res.StatusCode, time.Since(begin))
		}
		waitLeases(t, r, 0)
	})
}

func TestHeaderLimitsAndResponseHeaders(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		w.Header().Set("Server", "mock")
		if r.Method != "HEAD" {
			io.WriteString(w, "hello")
		}
	})
	g := start(t, newRouter(t, w.URL), Options{MaxHeaderBytes: 1024})
	res, _ := raw(t, g.Addr(), "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 8000)+"\r\n\r\n")
	if res.StatusCode != 431 {
		t.Fatalf("too-large headers: %d", res.StatusCode)
	}
	res, _ = raw(t, g.Addr(), "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if res.Header.Get("Content-Length") != "5" && res.ContentLength != 5 {
		t.Fatalf("HEAD lost Content-Length: %v %d", res.Header, res.ContentLength)
	}
	if len(res.Header["Date"]) != 1 || len(res.Header["Server"]) != 1 {
		t.Fatalf("duplicate Date or Server: %v", res.Header)
	}
}

func TestMetricsOnlyOnTheirOwnPort(t *testing.T) {
	seen := make(chan string, 1)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { seen <- r.URL.Path })
	r := newRouter(t, w.URL)
	port := 0
	g := start(t, r, Options{MetricsPort: &port})
	get(t, g, "/metrics", nil)
	if p := <-seen; p != "/metrics" {
		t.Fatalf("the worker got %q", p)
	}
	waitLeases(t, r, 0)
	res, err := client().Get("http://" + g.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`bounded_router_requests_total{branch="random_fallback"} 1`,
		`bounded_router_worker_load{worker="` + w.URL + `"} 0`,
		`bounded_router_worker_healthy{worker="` + w.URL + `"} 1`,
		"bounded_router_active_leases 0", "bounded_router_leaked_leases_total 0",
		"# TYPE bounded_router_requests_total counter",
		`bounded_router_worker_prefill_load{worker="` + w.URL + `"} 0`,
		`bounded_router_worker_prefill_requests{worker="` + w.URL + `"} 0`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	if res.Header.Get("Content-Type") != metricsContentType {
		t.Errorf("content type %q", res.Header.Get("Content-Type"))
	}
}

func TestGracefulShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "a")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "b")
	})
	r := newRouter(t, w.URL)
	g, err := Start(health.New(r, health.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client().Get("http://" + g.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- g.Shutdown(5 * time.Second) }()
	eventually(t, "the listener closed", func() bool {
		c, err := net.Dial("tcp", g.Addr())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	body, err := io.ReadAll(res.Body)
	if err != nil || string(body) != "ab" {
		t.Fatalf("in-flight stream %q %v", body, err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if leases(r) != 0 {
		t.Fatal("leases after shutdown")
	}
}

func TestShutdownCutsStreamsPastTheTimeout(t *testing.T) {
	url, _, cancelled := blockingWorker(t, true)
	r := newRouter(t, url)
	g, err := Start(health.New(r, health.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client().Get("http://" + g.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	begin := time.Now()
	err = g.Shutdown(200 * time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(begin) > 3*time.Second {
		t.Fatalf("shutdown: %v after %v", err, time.Since(begin))
	}
	if leases(r) != 0 {
		t.Fatalf("%d leases after shutdown returned", leases(r))
	}
	<-cancelled
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions([]byte(`{"port": 0, "max_body_size": 10, "first_byte_timeout": 1.5}`))
	if err != nil || o.MaxBodySize != 10 || o.FirstByteTimeout != 1.5 || o.ConnectTimeout != 10 || o.Host != "127.0.0.1" {
		t.Fatalf("%+v %v", o, err)
	}
	for text, field := range map[string]string{
		`{"port": 70000}`:       "port",
		`{"metrics_port": -1}`:  "metrics_port",
		`{"max_body_size": -1}`: "max_body_size",
		`{"idle_timeout": -2}`:  "idle_timeout",
		`{"nope": 1}`:           "nope",
		`{"port": "80"}`:        "port",
		`[1]`:                   "",
		// Regression (found by an audit): read more loosely than the contract's "Validation".
		`{"PORT": 0}`:                      "case-sensitive",
		`{"port": 0}}`:                     "unexpected data after the JSON object",
		`{"control_plane_api_keys": null}`: "control_plane_api_keys must be a list, not null",
	} {
		_, err := ParseOptions([]byte(text))
		if err == nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", text, err)
		}
	}
}

func TestEventStreamWithKnownLengthFlushedPerEvent(t *testing.T) {
	release := make(chan struct{})
	w := heldStream(t, release, map[string]string{"Content-Type": "text/event-stream; charset=utf-8", "Content-Length": "18"})
	g := start(t, newRouter(t, w.URL), Options{})
	res, err := client().Get("http://" + g.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first := make([]byte, 9)
	if _, err := io.ReadFull(res.Body, first); err != nil || string(first) != "data: a\n\n" {
		t.Fatalf("first event %q %v", first, err)
	}
	close(release)
}

func TestAccessLog(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	r := newRouter(t, w.URL)
	g, err := New(health.New(r, health.Options{}), Options{AccessLog: true})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	g.accessLog = slog.New(slog.NewJSONHandler(&out, nil))
	serve(t, g)
	c := client()
	for _, target := range []string{"/v1/x?secret=1", "/a/../b"} {
		req, _ := http.NewRequest("GET", "http://"+g.Addr()+"/", nil)
		req.URL.Opaque = target
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	eventually(t, "two log lines", func() bool { return strings.Count(out.String(), "\n") == 2 })
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var first, second map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[1]), &second)
	if first["path"] != "/v1/x" || first["status"] != 200.0 || first["worker"] != w.URL || first["branch"] != "random_fallback" || first["bytes"] != 5.0 {
		t.Errorf("proxied request logged as %s", lines[0])
	}
	if second["status"] != 400.0 || second["worker"] != nil {
		t.Errorf("refused request logged as %s", lines[1])
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAmbiguousFramingNeverReachesAWorker(t *testing.T) {
	seen := make(chan string, 8)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- r.RequestURI + " " + string(b)
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	for _, framing := range []string{
		"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"Content-Length: -1\r\n\r\n",
		"Content-Length: 5 5\r\n\r\nhello",
	} {
		res, _ := raw(t, g.Addr(), "POST /v1/x HTTP/1.1\r\nHost: x\r\n"+framing)
		if res.StatusCode < 400 {
			t.Errorf("%q: status %d", framing, res.StatusCode)
		}
	}
	// Content-Length and Transfer-Encoding together: the chunked framing wins and the worker
	// gets the body with a length of the gateway's own; the bytes after it are not a request
	// to the worker.
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := <-seen; got != "/v1/x abc" {
		t.Fatalf("the worker got %q", got)
	}
	select {
	case got := <-seen:
		if got != "/smuggled " { // only as the client's own next request, never inside the first
			t.Fatalf("the worker got %q", got)
		}
	case <-time.After(300 * time.Millisecond):
	}
	if routed(r) > 2 {
		t.Fatalf("%d routed", routed(r))
	}
}

func TestChunkedBodyCutByTheClientIsNotForwarded(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { t.Error("a cut body reached the worker") })
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+"3\r\nabc\r\n"+strings.Repeat("1000\r\n"+strings.Repeat("z", 4096)+"\r\n", 3)+"10\r\nshort")
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	time.Sleep(100 * time.Millisecond)
	if routed(r) != 0 {
		t.Fatal("a request whose body was cut was routed")
	}
	// And a whole chunked body of several pieces arrives intact.
	body := strings.Repeat("0123456789", 50000)
	got := make(chan string, 1)
	w2 := worker(t, func(w http.ResponseWriter, r *http.Request) { b, _ := io.ReadAll(r.Body); got <- string(b) })
	g2 := start(t, newRouter(t, w2.URL), Options{})
	req, _ := http.NewRequest("POST", "http://"+g2.Addr()+"/", io.NopCloser(strings.NewReader(body))) // no length: chunked
	res, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if b := <-got; b != body {
		t.Fatalf("a %d-byte chunked body arrived as %d bytes", len(body), len(b))
	}
}

func TestManyHeadersCostLinearTime(t *testing.T) {
	seen := make(chan int, 1)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { seen <- len(r.Header) })
	g := start(t, newRouter(t, w.URL), Options{})
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "X-H%d: v\r\n", i)
	}
	begin := time.Now()
	res, _ := raw(t, g.Addr(), "GET / HTTP/1.1\r\nHost: x\r\n"+b.String()+"Connection: close\r\n\r\n")
	if res.StatusCode != 200 || <-seen < 5000 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("5000 headers took %v", d)
	}
}

func TestSlowHeadersAreCut(t *testing.T) {
	r := newRouter(t, worker(t, func(w http.ResponseWriter, r *http.Request) {}).URL)
	g := start(t, r, Options{ReadHeaderTimeout: 0.2})
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	begin := time.Now()
	io.ReadAll(conn) // ends when the gateway closes the connection
	if d := time.Since(begin); d > 3*time.Second || routed(r) != 0 {
		t.Fatalf("closed after %v, %d routed", d, routed(r))
	}
}

func TestRoutesByTheRoutersRoutingKeyHeaders(t *testing.T) {
	var urls []string
	for i := 0; i < 3; i++ {
		urls = append(urls, worker(t, func(w http.ResponseWriter, r *http.Request) {}).URL)
	}
	cfg := core.DefaultConfig(urls...)
	cfg.Policy = core.Policy{Kind: core.PolicyConsistentHashing}
	cfg.RoutingKeyHeaders = []string{"X-Session-Id"}
	r, err := core.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, r, Options{ExposeRoutingHeaders: true})
	for i := 0; i < 20; i++ {
		key := fmt.Sprint("session-", i)
		req := core.KeyRequest([]byte(key))
		want := r.Select(&req)
		res, _ := get(t, g, "/v1/completions", http.Header{"X-Session-Id": {key}, "X-Smg-Routing-Key": {"ignored"}})
		if got := res.Header.Get(HeaderWorker); got != want.WorkerURL {
			t.Fatalf("key %s went to %s, router says %s", key, got, want.WorkerURL)
		}
		if got := res.Header.Get(HeaderBranch); got != "routing_key_hit" {
			t.Fatalf("branch %q", got)
		}
	}
	// X-SMG-Routing-Key is not among the router's names: alone it is no key.
	res, _ := get(t, g, "/v1/completions", http.Header{"X-Smg-Routing-Key": {"k"}})
	if got := res.Header.Get(HeaderBranch); got != "random_fallback" {
		t.Fatalf("branch %q, want random_fallback", got)
	}
	waitLeases(t, r, 0)
}

// The worker's first body byte marks the lease's first token (docs/contract.md, "Prefill
// load"): between the response headers and the body the request is in the prefill queue.
func TestFirstBodyByteMarksTheFirstToken(t *testing.T) {
	body, done := make(chan struct{}), make(chan struct{})
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-body
		io.WriteString(w, "data: a\n\n")
		http.NewResponseController(w).Flush()
		<-done
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	res, err := client().Get("http://" + g.Addr() + "/s")
	if err != nil {
		close(body)
		close(done)
		t.Fatal(err)
	}
	waiting := r.Workers()[0]
	close(body)
	line, _ := bufio.NewReader(res.Body).ReadString('\n')
	started := r.Workers()[0]
	close(done)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	waitLeases(t, r, 0)
	if waiting.PrefillRequests != 1 || waiting.Requests != 1 {
		t.Errorf("before the body: %d of %d leases waiting for their first token, want 1 of 1", waiting.PrefillRequests, waiting.Requests)
	}
	if line != "data: a\n" || started.PrefillRequests != 0 || started.PrefillLoad != 0 || started.Requests != 1 {
		t.Errorf("after the first byte (%q): %d waiting (load %d) of %d, want 0 of 1", line, started.PrefillRequests, started.PrefillLoad, started.Requests)
	}
}
