package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// The proxy step's rules that the ReverseProxy kept before forward.go (contract: HTTP proxies):
// these pass on the ReverseProxy path too, which is how they were written.

func TestEarlyHintsReachTheClientBeforeTheAnswer(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		for _, link := range []string{"</a.css>; rel=preload", "</b.js>; rel=preload"} {
			w.Header().Set("Link", link)
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Del("Link")
		io.WriteString(w, "ok")
	})
	g := start(t, newRouter(t, w.URL), Options{})
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
		hints = append(hints, http.StatusText(code)+" "+header.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://"+g.Addr()+"/v1/models", nil)
	res, body := do(t, req, nil)
	want := []string{"Early Hints </a.css>; rel=preload", "Early Hints </b.js>; rel=preload"}
	if res.StatusCode != 200 || body != "ok" || len(hints) != 2 || hints[0] != want[0] || hints[1] != want[1] || res.Header.Get("Link") != "" {
		t.Fatalf("got %d %q, hints %q, Link %q; want 200 \"ok\" after %q and no Link on the answer", res.StatusCode, body, hints, res.Header.Get("Link"), want)
	}
}

func TestTrailersFollowTheBody(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "data")
		w.(http.Flusher).Flush() // chunked: trailers need it
		w.Header().Set("X-Sum", "7")
		w.Header().Set(http.TrailerPrefix+"X-Late", "8") // not announced
	})
	g := start(t, newRouter(t, w.URL), Options{})
	res, body := get(t, g, "/v1/completions", nil)
	if body != "data" || res.Trailer.Get("X-Sum") != "7" || res.Trailer.Get("X-Late") != "8" {
		t.Fatalf("got %q with trailers %v, want \"data\" with X-Sum 7 and X-Late 8", body, res.Trailer)
	}
}

func TestAnUnaskedProtocolSwitchIsA502(t *testing.T) {
	addr, _ := rawWorker(t, answering("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n", nil))
	g := start(t, newRouter(t, "http://"+addr), Options{DisableRetries: true})
	if res, body := get(t, g, "/v1/models", nil); res.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d %q, want 502: the client asked for no upgrade", res.StatusCode, body)
	}
}

func TestNoEarlyHintsForAnHTTP10Client(t *testing.T) {
	// RFC 9110, 15.2: a server must not send a 1xx answer to an HTTP/1.0 client.
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "ok")
	})
	g := start(t, newRouter(t, w.URL), Options{})
	conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n")
	answer, _ := io.ReadAll(conn) // HTTP/1.0: the gateway closes after the answer
	if first, _, _ := strings.Cut(string(answer), "\r\n"); first != "HTTP/1.0 200 OK" || !strings.HasSuffix(string(answer), "ok") {
		t.Fatalf("got %q, want the 200 alone", answer)
	}
}
