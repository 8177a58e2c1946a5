package gateway

// The gateway's edge on fasthttp: the cases a review of the port found (each failed before its
// fix): upgrades and the other hijacked answers, shutdown past its bound, deadlines, headers.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/health"
)

// upgradeWorker answers an upgrade request with a 101 for protocol x, then runs after(conn).
func upgradeWorker(t *testing.T, before <-chan struct{}, after func(conn net.Conn, br *bufio.Reader)) string {
	addr, _ := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		if _, err := readRaw(br); err != nil {
			return
		}
		if before != nil {
			<-before
		}
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
		after(conn, br)
	})
	return "http://" + addr
}

const upgradeRequest = "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"

func readHead(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("head so far %q: %v", head.String(), err)
		}
		head.WriteString(line)
		if line == "\r\n" {
			return head.String()
		}
	}
}

// A working upgrade: bytes go both ways, and the lease ends when the client closes.
func TestUpgradeEchoes(t *testing.T) {
	url := upgradeWorker(t, nil, func(conn net.Conn, br *bufio.Reader) { io.Copy(conn, br) })
	r := newRouter(t, url)
	g := start(t, r, Options{})
	conn := sendRaw(t, g.Addr(), upgradeRequest)
	br := bufio.NewReader(conn)
	head := readHead(t, br)
	if !strings.HasPrefix(head, "HTTP/1.1 101") {
		t.Fatalf("head %q", head)
	}
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v (head %q)", buf, err, head)
	}
	if leases(r) != 1 {
		t.Fatalf("leases %d during the upgrade, want 1", leases(r))
	}
	conn.Close()
	waitLeases(t, r, 0)
}

// Contract (HTTP proxies, step 7 / upgrade.go's doc): the copy ends when EITHER side closes.
// The worker closes right after its 101; the client keeps its connection open and silent.
func TestUpgradeEndsWhenTheWorkerCloses(t *testing.T) {
	url := upgradeWorker(t, nil, func(conn net.Conn, br *bufio.Reader) {})
	r := newRouter(t, url)
	g := start(t, r, Options{})
	conn := sendRaw(t, g.Addr(), upgradeRequest)
	br := bufio.NewReader(conn)
	readHead(t, br)
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the client's read after the worker closed: %v, want EOF", err)
	}
	conn.Close()
	waitLeases(t, r, 0)
}

// Contract: an upgraded connection ends at request_timeout_secs at the latest.
func TestUpgradeEndsAtTheDeadline(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	url := upgradeWorker(t, nil, func(conn net.Conn, br *bufio.Reader) { <-hold })
	r := newRouter(t, url)
	g := start(t, r, Options{RequestTimeout: 1})
	conn := sendRaw(t, g.Addr(), upgradeRequest)
	readHead(t, bufio.NewReader(conn))
	waitLeases(t, r, 0) // within 5 s of a 1 s deadline
}

// A 101 that arrives while Shutdown drains: the upgraded connection must be served (or at
// least its lease released), and Shutdown must not report a stuck request.
func TestUpgradeDuringShutdown(t *testing.T) {
	answer := make(chan struct{})
	url := upgradeWorker(t, answer, func(conn net.Conn, br *bufio.Reader) { io.Copy(conn, br) })
	r := newRouter(t, url)
	g := start(t, r, Options{})
	conn := sendRaw(t, g.Addr(), upgradeRequest)
	waitLeases(t, r, 1)
	done := make(chan error, 1)
	go func() { done <- g.Shutdown(20 * time.Second) }()
	eventually(t, "listener closed", func() bool {
		c, err := net.DialTimeout("tcp", g.Addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(answer)
	br := bufio.NewReader(conn)
	head := readHead(t, br)
	t.Logf("client got %q", head)
	conn.Close()
	waitLeases(t, r, 0)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// endlessStream is a worker that streams 64 KiB pieces, up to 256 MiB, until its client leaves.
func endlessStream(t *testing.T) *httptest.Server {
	return worker(t, func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for i := 0; i < 4096 && r.Context().Err() == nil; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
}

// Shutdown past its bound must cut a client that stopped reading a stream (main: server.Close
// closes its connection), releasing its lease, not leave it to the write deadline.
func TestShutdownCutsASlowReader(t *testing.T) {
	w := endlessStream(t)
	r := newRouter(t, w.URL)
	g, err := Start(health.New(r, health.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n")
	conn.(*net.TCPConn).SetReadBuffer(4096)
	waitLeases(t, r, 1)
	time.Sleep(500 * time.Millisecond) // the socket buffers fill; the client reads nothing
	began := time.Now()
	err = g.Shutdown(200 * time.Millisecond)
	t.Logf("Shutdown after %v: %v; leases %d", time.Since(began), err, leases(r))
	if leases(r) != 0 {
		t.Fatalf("lease still held after Shutdown returned: %v", err)
	}
}

// Pipelining: the 1xx of a second request must not overtake the first request's answer.
func TestPipelinedEarlyHintsStayInOrder(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/b" {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		io.WriteString(w, "ok"+r.URL.Path)
	})
	g := start(t, newRouter(t, w.URL), Options{})
	conn := sendRaw(t, g.Addr(), "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	first := readHead(t, br)
	if !strings.HasPrefix(first, "HTTP/1.1 200") {
		t.Fatalf("first head on the connection is %q, want /a's 200", first)
	}
}

// A worker's answer naming a header in a second Connection line: that header is hop-by-hop and
// must not reach the client (RFC 9110 7.6.1; the ReverseProxy reads every Connection line).
func TestResponseConnectionNamesOnEveryLine(t *testing.T) {
	addr, _ := rawWorker(t, answering("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: X-Secret\r\nX-Secret: s\r\nContent-Length: 2\r\n\r\nok", nil))
	g := start(t, newRouter(t, "http://"+addr), Options{})
	res, body := get(t, g, "/v1/x", nil)
	if body != "ok" || res.Header.Get("X-Secret") != "" {
		t.Fatalf("got %q, X-Secret %q; want it dropped", body, res.Header.Get("X-Secret"))
	}
}

// The head the client gets for a worker's HEAD/204/304 answers, raw.
func TestBodylessHeads(t *testing.T) {
	for _, c := range []struct{ method, answer string }{
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"},
		{"GET", "HTTP/1.1 204 No Content\r\n\r\n"},
		{"GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nEtag: \"a\"\r\n\r\n"},
		{"GET", "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"},
	} {
		addr, _ := rawWorker(t, answering(c.answer, nil))
		r := newRouter(t, "http://"+addr)
		g := start(t, r, Options{DisableRetries: true})
		req := c.method + " /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"
		if strings.Contains(c.answer, "101") {
			req = upgradeRequest
		}
		conn := sendRaw(t, g.Addr(), req)
		head := strings.ToLower(readHead(t, bufio.NewReader(conn)))
		if strings.Contains(head, "transfer-encoding") || strings.Contains(head, "content-length") != strings.Contains(c.answer, "Content-Length") {
			t.Errorf("%s -> worker %q: the client got %q, framed otherwise", c.method, c.answer, head)
		}
		conn.Close()
		waitLeases(t, r, 0)
	}
}

// An HTTP/1.0 client gets a body of unknown length unchunked, ended by the close (net/http).
func TestAnHTTP10ClientGetsTheWorkersBytes(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: a\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "data: b\n\n")
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.0\r\nHost: x\r\n\r\n")
	all, err := io.ReadAll(conn)
	t.Logf("client got %q (%v)", all, err)
	if !strings.HasSuffix(string(all), "\r\n\r\ndata: a\n\ndata: b\n\n") {
		t.Fatalf("HTTP/1.0 client's body is not the worker's bytes")
	}
	waitLeases(t, r, 0)
}

// Contract (Deadlines and connections): a client that stops reading is cut by the write
// deadline, request_timeout_secs + body_timeout after its request's headers.
func TestWriteDeadlineCountsFromTheRequest(t *testing.T) {
	const size = 64 << 20
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Second) // the worker's headers come 2 s after the request
		w.Header().Set("Content-Length", "67108864")
		w.Write(make([]byte, size))
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{RequestTimeout: 3, BodyTimeout: 0.5})
	sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	waitLeases(t, r, 1)
	// Released 3.5 s after the request, within waitLeases' 5 s; counted from the worker's
	// headers, as it was, the deadline held it 5.5 s.
	waitLeases(t, r, 0)
}

// After Shutdown returns, no connection is served any more (main: server.Close).
func TestNothingServedAfterShutdown(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
		}
		io.WriteString(w, "ok")
	})
	r := newRouter(t, w.URL)
	g, err := Start(health.New(r, health.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn := sendRaw(t, g.Addr(), "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	waitLeases(t, r, 1)
	err = g.Shutdown(200 * time.Millisecond)
	t.Logf("Shutdown: %v", err)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err == nil {
		io.Copy(io.Discard, res.Body)
		t.Logf("first request: %d close=%v", res.StatusCode, res.Close)
	}
	io.WriteString(conn, "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if res, err := http.ReadResponse(br, nil); err == nil {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("a request sent after Shutdown returned was served: %d %q; routed %d", res.StatusCode, b, routed(r))
	}
}

// Contract (Deadlines and connections): an HTTP/1.0 client that stops reading a stream of
// unknown length is cut by the write deadline too (answerUntilClose hijacks the connection,
// and fasthttp clears its deadlines before a hijack).
func TestHTTP10SlowReaderIsCut(t *testing.T) {
	w := endlessStream(t)
	r := newRouter(t, w.URL)
	g := start(t, r, Options{RequestTimeout: 0.5, BodyTimeout: 0.5})
	conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.0\r\nHost: x\r\n\r\n") // and never read
	conn.(*net.TCPConn).SetReadBuffer(4096)
	waitLeases(t, r, 1)
	waitLeases(t, r, 0) // cut at request_timeout_secs + body_timeout
}

func TestIdleCutLogsOnce(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := newRouter(t, heldStream(t, release, nil).URL)
	g := start(t, r, Options{IdleTimeout: 0.2})
	var logs syncBuffer
	g.errorLog.SetOutput(&logs)
	conn := sendRaw(t, g.Addr(), "GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
	io.ReadAll(conn)
	waitLeases(t, r, 0)
	if got := strings.Count(logs.String(), "\n"); got != 1 || !strings.Contains(logs.String(), "sent nothing for idle_timeout") {
		t.Fatalf("logged %q, want the cut once", logs.String())
	}
}

// "Connection: close, Upgrade" asks for an upgrade as "Connection: Upgrade" does (net/http's
// reading, which fasthttp's ConnectionUpgrade does not share): the worker gets the Upgrade.
func TestAnUpgradeNextToCloseIsForwardedAsOne(t *testing.T) {
	got := make(chan []byte, 1)
	addr, _ := rawWorker(t, answering(okAnswer, got))
	g := start(t, newRouter(t, "http://"+addr), Options{})
	conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\nConnection: close, Upgrade\r\nUpgrade: x\r\n\r\n")
	io.ReadAll(conn)
	if raw := <-got; !strings.Contains(string(raw), "\r\nUpgrade: x\r\n") {
		t.Fatalf("the worker got %q, want the upgrade asked for", raw)
	}
}

// An upgraded connection open (and idle) at Shutdown: Shutdown(200ms) should cut it and
// return with its lease released.
func TestShutdownCutsAnOpenUpgrade(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	url := upgradeWorker(t, nil, func(conn net.Conn, br *bufio.Reader) { <-hold })
	r := newRouter(t, url)
	g, err := Start(health.New(r, health.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn := sendRaw(t, g.Addr(), upgradeRequest)
	readHead(t, bufio.NewReader(conn))
	waitLeases(t, r, 1)
	began := time.Now()
	err = g.Shutdown(200 * time.Millisecond)
	t.Logf("Shutdown took %v: %v; leases %d", time.Since(began), err, leases(r))
	if leases(r) != 0 {
		t.Fatalf("lease still held after Shutdown returned")
	}
}

// The same for an HTTP/1.0 client's stream of unknown length (hijacked too).
func TestShutdownCutsAnHTTP10Stream(t *testing.T) {
	release := make(chan struct{})
	r := newRouter(t, heldStream(t, release, nil).URL)
	t.Cleanup(func() { close(release) })
	g, err := Start(health.New(r, health.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.0\r\nHost: x\r\n\r\n")
	buf := make([]byte, 10)
	n, _ := conn.Read(buf)
	if n == 0 {
		t.Fatal("the stream's head did not arrive")
	}
	waitLeases(t, r, 1)
	began := time.Now()
	err = g.Shutdown(200 * time.Millisecond)
	t.Logf("Shutdown took %v: %v; leases %d", time.Since(began), err, leases(r))
	if leases(r) != 0 {
		t.Fatalf("lease still held after Shutdown returned")
	}
}

// A worker that switches protocols before it has read a large request body (its write still
// under way) cannot be handed the client's bytes: they would follow the rest of the body on the
// same connection. The gateway answers 502.
func TestASwitchBeforeTheBodyWasReadIsRefused(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr, _ := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		for { // the head only: the body is left unread
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
		<-hold // and reads nothing more
	})
	r := newRouter(t, "http://"+addr)
	g := start(t, r, Options{DisableRetries: true, MaxBodySize: 64 << 20})
	body := strings.Repeat("b", 32<<20) // more than the sockets between them hold
	res, _ := raw(t, g.Addr(), "POST /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\nContent-Length: "+itoa(int64(len(body)))+"\r\n\r\n"+body)
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d, want 502: the switch came before the body was read", res.StatusCode)
	}
	waitLeases(t, r, 0)
}
