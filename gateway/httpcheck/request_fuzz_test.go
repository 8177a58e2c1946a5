package httpcheck

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// pipeListener hands net/http's server one end of each in-memory connection.
type pipeListener chan net.Conn

func (l pipeListener) Accept() (net.Conn, error) {
	c, ok := <-l
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l pipeListener) Close() error   { return nil }
func (l pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// startPipeServer starts net/http's server, set up as the gateway's, on in-memory connections,
// with a handler that serves every request with 200 at once, before any body.
func startPipeServer(tb testing.TB) pipeListener {
	l := make(pipeListener)
	served := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close") // else net/http reads the body before it answers
		http.NewResponseController(w).Flush()
	}
	hs := &http.Server{Handler: http.HandlerFunc(served),
		MaxHeaderBytes: maxHeaderBytes, DisableGeneralOptionsHandler: true, ErrorLog: log.New(io.Discard, "", 0)}
	go hs.Serve(l)
	tb.Cleanup(func() { close(l) })
	return l
}

// netHTTPStatus is the status net/http's server (set up as the gateway's) answers to raw:
// 200 from the handler when it serves the request, else its own refusal.
func netHTTPStatus(t testing.TB, l pipeListener, raw string) int {
	client, server := net.Pipe()
	defer client.Close()
	l <- server
	client.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { io.WriteString(client, raw) }()
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	if err != nil {
		t.Fatalf("no answer from net/http to %q: %v", raw, err)
	}
	return resp.StatusCode
}

// FuzzRequestMatchesNetHTTP: for a request head that fasthttp's parser accepts, Request refuses
// it with the status net/http's server answers, and lets it through when net/http serves it.
func FuzzRequestMatchesNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET /v1/x HTTP/1.1\r\nHost: h\r\n", "GET /a%zz HTTP/1.1\r\nHost: h\r\n", "GET /v1/x HTTP/2.0\r\nHost: h\r\n",
		"GET http://a/b%2 HTTP/1.1\r\nHost: h\r\n", "GET /x HTTP/1.1\r\nHost: u@a\r\n", "GET /x HTTP/1.1\r\nHost: h\r\nX A: 1\r\n",
		"POST /x HTTP/1.1\r\nHost: h\r\nExpect: foo\r\n", "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n",
		"GET /x HTTP/1.0\r\nExpect: 100-continue, x\r\n", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n",
	} {
		f.Add(s)
	}
	l := startPipeServer(f)
	f.Fuzz(func(t *testing.T, head string) {
		raw := head + "\r\n\r\n"
		if raw[0] == '\r' || raw[0] == '\n' {
			return // fasthttp skips empty lines before the request line: in knownDifferences (leadingCRLF)
		}
		h := new(fasthttp.RequestHeader)
		if h.Read(bufio.NewReader(strings.NewReader(raw))) != nil || len(raw) > maxHeaderBytes {
			return // fasthttp refuses it itself: the parity test's business
		}
		want := netHTTPStatus(t, l, raw)
		got := http.StatusOK
		if r := Request(h); r != nil {
			got = r.Status
		}
		if got != want {
			t.Errorf("%q: Request answers %d, net/http %d", raw, got, want)
		}
	})
}

// TestVectorsAreNetHTTPs: TestRequest's expected statuses are what net/http's server answers.
func TestVectorsAreNetHTTPs(t *testing.T) {
	l := startPipeServer(t)
	for _, c := range requestVectors {
		want := c.status
		if want == 0 {
			want = http.StatusOK
		}
		if got := netHTTPStatus(t, l, c.raw); got != want {
			t.Errorf("%s: net/http answers %q with %d, the vector says %d", c.name, c.raw, got, want)
		}
	}
}
