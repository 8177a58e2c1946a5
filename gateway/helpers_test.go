package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
)

// worker starts a loopback worker that the test stops at its end.
func worker(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func newRouter(t *testing.T, urls ...string) *core.Router {
	t.Helper()
	r, err := core.NewRouter(core.DefaultConfig(urls...))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start serves a gateway on a free loopback port until the test ends.
func start(t *testing.T, r *core.Router, opts Options) *Gateway {
	t.Helper()
	g, err := Start(health.New(r, health.Options{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Shutdown(2 * time.Second) })
	return g
}

// serve serves a gateway built with New on a free loopback port until the test ends.
func serve(t *testing.T, g *Gateway) {
	t.Helper()
	if err := g.listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Shutdown(2 * time.Second) })
}

// client is a keep-alive client with no cookie jar and a bounded wait.
func client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
}

func get(t *testing.T, g *Gateway, target string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+g.Addr()+target, nil)
	return do(t, req, header)
}

// do sends req with header added and reads the whole answer.
func do(t *testing.T, req *http.Request, header http.Header) (*http.Response, string) {
	t.Helper()
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// heldStream is a worker that streams "data: a", then waits for release to close before it
// sends "data: b" (with extra headers set first).
func heldStream(t *testing.T, release chan struct{}, header map[string]string) *httptest.Server {
	return worker(t, func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		io.WriteString(w, "data: a\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: b\n\n")
	})
}

// sendRaw writes raw bytes on a new connection to addr, closed at the test's end at the latest;
// reads and writes on it give up after 10 s.
func sendRaw(t *testing.T, addr, request string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	return conn
}

// raw sends raw bytes on a new connection and reads one response.
func raw(t *testing.T, addr, request string) (*http.Response, string) {
	t.Helper()
	conn := sendRaw(t, addr, request)
	defer conn.Close()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
	}
}

func leases(r *core.Router) int { return r.Stats().ActiveLeases }

func waitLeases(t *testing.T, r *core.Router, n int) {
	t.Helper()
	eventually(t, "active leases == "+itoa(int64(n)), func() bool { return leases(r) == n })
}

func routed(r *core.Router) (n uint64) {
	for _, c := range r.Stats().Branches {
		n += c
	}
	return n
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func newRouterB(urls ...string) (*core.Router, error) {
	return core.NewRouter(core.DefaultConfig(urls...))
}

// unansweredListener is a loopback address whose connections are never accepted and whose accept
// queue is full, so that a further dial hangs (Linux drops the SYN) until the dialer gives up: a
// worker that cannot be connected to, with no packet leaving the machine.
func unansweredListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// A backlog of 0 queues one connection: two fill it whatever the kernel rounds it to here.
	for i := 0; i < 2; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break // the queue is already full
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr
}

// size is the number of targets the cache holds.
func (c *targetCache) size() int {
	if m := c.targets.Load(); m != nil {
		return len(*m)
	}
	return 0
}
