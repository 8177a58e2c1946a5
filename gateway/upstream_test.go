package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/gateway/rawio"
	"github.com/valyala/fasthttp"
)

// rawWorker is a loopback TCP server whose connections serve handles, each on its own
// goroutine; the test closes the listener and every connection at its end, which ends the
// handlers' loops.
func rawWorker(t *testing.T, serve func(conn net.Conn)) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	accepted = new(atomic.Int32)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			accepted.Add(1)
			go func() {
				defer conn.Close()
				serve(conn)
			}()
		}
	}()
	return ln.Addr().String(), accepted
}

// readRaw reads one request's bytes as they arrived: the header, then Content-Length bytes.
func readRaw(br *bufio.Reader) ([]byte, error) {
	var raw bytes.Buffer
	length := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		raw.WriteString(line)
		if name, value, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(value))
		}
		if line == "\r\n" {
			break
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, err
	}
	raw.Write(body)
	return raw.Bytes(), nil
}

// answering serves every request on a connection with answer, and sends what it read to got.
func answering(answer string, got chan<- []byte) func(net.Conn) {
	return func(conn net.Conn) {
		br := bufio.NewReader(conn)
		for {
			raw, err := readRaw(br)
			if err != nil {
				return
			}
			if got != nil {
				got <- raw
			}
			if _, err := io.WriteString(conn, answer); err != nil {
				return
			}
		}
	}
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

func newUpstream(maxIdle int) *upstream {
	return &upstream{dial: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, maxIdle: maxIdle, idleTimeout: time.Minute}
}

// newTransport is net/http's Transport as the gateway used it before fasthttp: the reference the
// tests compare upstream with.
func newTransport() *http.Transport { return &http.Transport{Proxy: nil, DisableCompression: true} }

// clientTarget is a client's raw path and query, forwarded byte for byte.
const clientTarget = "/v1/a%2Fb//c?x=1&&y"

// clientHead is the head of a client's request as the gateway's server parsed it: its own Host,
// a routing key, a type, a header given twice, extra lines, and its body's length.
func clientHead(t *testing.T, method, extra, body string) *fasthttp.RequestHeader {
	t.Helper()
	head := method + " " + clientTarget + " HTTP/1.1\r\nHost: gateway.example\r\nX-Smg-Routing-Key: user-1\r\n" +
		"Content-Type: application/json\r\nX-Twice: a\r\nX-Twice: b\r\n" + extra
	if body != "" {
		head += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	h := new(fasthttp.RequestHeader)
	if err := h.Read(bufio.NewReader(strings.NewReader(head + "\r\n"))); err != nil {
		t.Fatal(err)
	}
	return h
}

// proxied is a try's request to the worker at addr, as the gateway builds it from clientHead's.
func proxied(t *testing.T, method, addr, body string) *outgoing {
	return proxiedTo(t, "http://"+addr, method, "", body)
}

// proxiedTo is proxied for a worker URL, with extra lines in the client's head.
func proxiedTo(t *testing.T, workerURL, method, extra, body string) *outgoing {
	t.Helper()
	u, err := url.Parse(workerURL)
	if err != nil {
		t.Fatal(err)
	}
	target, err := newTarget(u)
	if err != nil {
		t.Fatal(err)
	}
	header := clientHead(t, method, extra, body)
	return &outgoing{target: target, method: []byte(method), rawTarget: clientTarget,
		header: header, named: connectionNamed(header), body: []byte(body), head: method == "HEAD"}
}

// transportRequest is proxied's request as the ReverseProxy handed it to the Transport: the
// same target, headers (an empty User-Agent, so that none is added) and body.
func transportRequest(t *testing.T, method, addr, body string) *http.Request {
	t.Helper()
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+addr+"/", reader)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque, req.URL.RawQuery = "/v1/a%2Fb//c", "x=1&&y"
	req.Header["User-Agent"] = []string{""}
	req.Header["X-Smg-Routing-Key"] = []string{"user-1"}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["X-Twice"] = []string{"a", "b"}
	return req
}

// send sends req through u; the caller reads and closes the body.
func send(u *upstream, try *canceller, req *outgoing) (*fasthttp.Response, answerBody, error) {
	res := new(fasthttp.Response)
	body, err := u.roundTrip(try, req, res)
	return res, body, err
}

// roundTrip sends req through u and returns its answer as "status reason body".
func roundTrip(t *testing.T, u *upstream, req *outgoing) string {
	t.Helper()
	res, body, err := send(u, new(canceller), req)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(res.StatusCode()) + " " + string(res.Header.StatusMessage()) + " " + string(b)
}

// transportRoundTrip is roundTrip through net/http's Transport.
func transportRoundTrip(t *testing.T, rt http.RoundTripper, req *http.Request) string {
	t.Helper()
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status + " " + string(b)
}

// answerText is an answer's body, read to its end, or the error that came instead.
func answerText(body answerBody, err error) string {
	if err != nil {
		return err.Error()
	}
	b, _ := io.ReadAll(body)
	body.Close()
	return string(b)
}

// parsedRequest is what a worker makes of a request's bytes: net/http's reading of them, with the
// header as a multiset (a map: the order of different names is lost, that of one name's lines kept).
type parsedRequest struct {
	Method, RequestURI, Host string
	Header                   http.Header
	ContentLength            int64
	Body                     string
}

func parseRequest(t *testing.T, raw []byte) parsedRequest {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	return parsedRequest{req.Method, req.RequestURI, req.Host, req.Header, req.ContentLength, string(body)}
}

// poolEntries is how many workers upstream's idle pool holds an entry for.
func poolEntries(u *upstream) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.idle)
}

// pooled is how many idle connections to addr upstream holds.
func pooled(u *upstream, addr string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.idle[addr])
}

func TestUpstreamWritesWhatTheTransportWrites(t *testing.T) {
	// The expected request is what net/http's Transport sends for the same one. upstream writes
	// the client's header lines in the client's order where the Transport sorts them, so the two
	// are compared as the worker parses them: method, target, Host, header multiset, body.
	got := make(chan []byte, 4)
	addr, _ := rawWorker(t, answering(okAnswer, got))
	rt, u := newTransport(), newUpstream(4)
	for _, c := range []struct{ method, body string }{{"POST", `{"prompt":"hi"}`}, {"POST", ""}, {"GET", ""}, {"DELETE", ""}} {
		if answer := transportRoundTrip(t, rt, transportRequest(t, c.method, addr, c.body)); answer != "200 OK ok" {
			t.Fatalf("Transport: %q", answer)
		}
		want := parseRequest(t, <-got)
		if answer := roundTrip(t, u, proxied(t, c.method, addr, c.body)); answer != "200 OK ok" {
			t.Fatalf("upstream: %q", answer)
		}
		if sent := parseRequest(t, <-got); !reflect.DeepEqual(sent, want) {
			t.Fatalf("%s %q: upstream wrote\n%+v\nthe Transport\n%+v", c.method, c.body, sent, want)
		}
	}
}

func TestUpstreamKeepsAConnectionOnlyAfterACleanEnd(t *testing.T) {
	addr, accepted := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	roundTrip(t, u, proxied(t, "POST", addr, "body"))
	if n := accepted.Load(); n != 1 {
		t.Fatalf("two requests read to their end took %d connections, want 1", n)
	}
	_, body, err := send(u, new(canceller), proxied(t, "GET", addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	body.Close() // before the end: the connection cannot be reused
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	if n := accepted.Load(); n != 2 {
		t.Fatalf("after an early close: %d connections, want 2", n)
	}
}

// The connections to workers are read and written by package rawio, whose calls the scheduler
// does not see (BENCHMARKS.md, "System calls the scheduler does not see").
func TestUpstreamConnectionsUseRawIO(t *testing.T) {
	addr, _ := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, list := range u.idle {
		for _, c := range list {
			if _, ok := c.conn.(*rawio.Conn); !ok {
				t.Fatalf("a pooled connection is a %T, not a *rawio.Conn", c.conn)
			}
			return
		}
	}
	t.Fatal("no connection was pooled")
}

func TestUpstreamGivesBackAConnectionOnlyWhenNothingFollowsTheAnswer(t *testing.T) {
	// RFC 9112 6.3 and 9.3: a body without a length ends with the connection, which is never
	// pooled, HTTP/1.1 or 1.0.
	for _, c := range []struct {
		answer string
		closes bool // the worker closes after its answer
		pooled int
	}{
		{"HTTP/1.1 204 No Content\r\n\r\n", false, 1}, // no body: back at once
		{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false, 0},
		{okAnswer + "HTTP/1.1 200 OK\r\n", false, 0}, // bytes nobody asked for
		{"HTTP/1.0 200 OK\r\n\r\nok", true, 0},       // a body that ends with the connection
		{"HTTP/1.1 200 OK\r\n\r\nok", true, 0},       // the same in HTTP/1.1
	} {
		addr, _ := rawWorker(t, func(conn net.Conn) {
			br := bufio.NewReader(conn)
			if _, err := readRaw(br); err == nil {
				io.WriteString(conn, c.answer)
			}
			if !c.closes {
				readRaw(br) // hold the connection open until the client closes it
			}
		})
		u := newUpstream(4)
		roundTrip(t, u, proxied(t, "GET", addr, ""))
		if n := pooled(u, addr); n != c.pooled {
			t.Errorf("%q: %d pooled connections, want %d", c.answer, n, c.pooled)
		}
		u.CloseIdleConnections()
	}
}

func TestUpstreamPoolsAtMostMaxIdleConnectionsPerWorker(t *testing.T) {
	arrived, release := make(chan struct{}, 3), make(chan struct{})
	addr, _ := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		for {
			if _, err := readRaw(br); err != nil {
				return
			}
			arrived <- struct{}{}
			<-release
			io.WriteString(conn, okAnswer)
		}
	})
	u := newUpstream(2)
	done := make(chan string, 3)
	for i := 0; i < 3; i++ {
		req := proxied(t, "GET", addr, "")
		go func() {
			_, body, err := send(u, new(canceller), req)
			done <- answerText(body, err)
		}()
	}
	for i := 0; i < 3; i++ {
		<-arrived // three requests at once: three connections
	}
	close(release)
	for i := 0; i < 3; i++ {
		if got := <-done; got != "ok" {
			t.Fatal(got)
		}
	}
	if n := pooled(u, addr); n != 2 {
		t.Fatalf("%d idle connections pooled, want max_idle_conns_per_host = 2", n)
	}
}

func TestUpstreamCancellingATryClosesItsConnection(t *testing.T) {
	received, closed := make(chan struct{}), make(chan struct{})
	addr, _ := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		readRaw(br)
		close(received)
		br.ReadByte() // returns when the gateway closes the connection; no answer is ever sent
		close(closed)
	})
	u := newUpstream(4)
	try := new(canceller)
	req := proxied(t, "POST", addr, "body")
	result := make(chan error, 1)
	go func() {
		_, _, err := send(u, try, req)
		result <- err
	}()
	<-received // the try waits for its answer
	try.cancel(errWorkerDown)
	if err := <-result; err != errWorkerDown {
		t.Fatalf("a cancelled try returned %v, want its context's cause", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // a bound on the wait, not a measurement
		t.Fatal("the worker's connection stayed open after the try was cancelled")
	}
}

func TestUpstreamDialsAgainWhenThePooledConnectionWasClosed(t *testing.T) {
	// The worker answers one request per connection, keep-alive, then closes the connection:
	// the next request, a POST (which the Transport does not resend once written), must go on a
	// new connection and reach the worker once.
	got := make(chan []byte, 4)
	addr, accepted := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		if raw, err := readRaw(br); err == nil {
			got <- raw
			io.WriteString(conn, okAnswer)
		}
	})
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "POST", addr, "first"))
	<-got
	u.mu.Lock()
	c := u.idle[addr][0]
	u.mu.Unlock()
	eventually(t, "the worker's close is visible on the pooled connection", func() bool { return !idleAndOpen(c.conn) })
	if answer := roundTrip(t, u, proxied(t, "POST", addr, "second")); answer != "200 OK ok" {
		t.Fatal(answer)
	}
	if raw := <-got; !bytes.HasSuffix(raw, []byte("second")) {
		t.Fatalf("the worker got %q", raw)
	}
	if n := accepted.Load(); n != 2 || len(got) != 0 {
		t.Fatalf("%d connections and %d more requests, want 2 and none", n, len(got))
	}
}

func TestUpstreamRetriesAsTheTransportDoes(t *testing.T) {
	// net/http's shouldRetryRequest for a request that failed on a reused connection. Its case of
	// a body that cannot be rewound (no GetBody) is gone: every body is in memory now.
	withKey := func(name string, req *outgoing) *outgoing {
		req.header.Set(name, "1")
		return req
	}
	cancelled := new(canceller)
	cancelled.cancel(nil)
	for _, c := range []struct {
		name          string
		try           *canceller
		req           *outgoing
		written, read int64
		want          bool
	}{
		{"POST, nothing written", new(canceller), proxied(t, "POST", "w", "b"), 0, 0, true},
		{"POST written, nothing read", new(canceller), proxied(t, "POST", "w", "b"), 100, 0, false},
		{"POST with an Idempotency-Key, nothing read", new(canceller), withKey("Idempotency-Key", proxied(t, "POST", "w", "b")), 100, 0, true},
		{"POST with an X-Idempotency-Key, nothing read", new(canceller), withKey("X-Idempotency-Key", proxied(t, "POST", "w", "b")), 100, 0, true},
		{"GET written, nothing read", new(canceller), proxied(t, "GET", "w", ""), 100, 0, true},
		{"GET, part of an answer read", new(canceller), proxied(t, "GET", "w", ""), 100, 5, false},
		{"GET, nothing written, the try cancelled", cancelled, proxied(t, "GET", "w", ""), 0, 0, false},
	} {
		conn := &upstreamConn{io: countedConn{written: c.written, read: c.read}}
		if got := conn.shouldRetry(c.try, c.req); got != c.want {
			t.Errorf("%s: retried %v, want %v", c.name, got, c.want)
		}
	}
}

func TestUpstreamPassesInformationalAnswersOn(t *testing.T) {
	// Any number of 1xx reach req.informational, as they reach a trace's Got1xxResponse in Go
	// 1.26's Transport, which bounds them no more once a trace takes them.
	hints := "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
	for _, n1xx := range []int{1, 5, 6, 40} {
		addr, _ := rawWorker(t, answering(strings.Repeat(hints, n1xx)+okAnswer, nil))
		var seen []string
		req := proxied(t, "GET", addr, "")
		req.informational = func(h *fasthttp.ResponseHeader) error {
			seen = append(seen, strconv.Itoa(h.StatusCode())+" "+string(h.Peek("Link")))
			return nil
		}
		if answer := roundTrip(t, newUpstream(4), req); answer != "200 OK ok" || len(seen) != n1xx || seen[0] != "103 </style.css>; rel=preload" {
			t.Fatalf("%d 1xx: answer %q, passed on %q", n1xx, answer, seen)
		}
	}
}

func TestUpstreamHandsOverAnUpgradedConnection(t *testing.T) {
	got := make(chan []byte, 1)
	addr, _ := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		raw, err := readRaw(br)
		if err != nil {
			return
		}
		got <- raw
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(conn, br) // echoes until the gateway closes
	})
	req := proxied(t, "GET", addr, "")
	req.upgrade = []byte("echo")
	res, body, err := send(newUpstream(4), new(canceller), req)
	if err != nil {
		t.Fatal(err)
	}
	rw, ok := body.(io.ReadWriteCloser)
	if res.StatusCode() != http.StatusSwitchingProtocols || !ok {
		t.Fatalf("status %d, body %T: want 101 and an io.ReadWriteCloser", res.StatusCode(), body)
	}
	defer rw.Close()
	if sent := parseRequest(t, <-got); sent.Header.Get("Connection") != "Upgrade" || sent.Header.Get("Upgrade") != "echo" {
		t.Fatalf("the worker was asked %v", sent.Header)
	}
	io.WriteString(rw, "ping")
	echo := make([]byte, 4)
	if _, err := io.ReadFull(rw, echo); err != nil || string(echo) != "ping" {
		t.Fatalf("echo %q, %v", echo, err)
	}
}

func TestUpstreamClosesAConnectionIdleTooLong(t *testing.T) {
	addr, _ := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	u.mu.Lock()
	c := u.idle[addr][0]
	u.mu.Unlock()
	u.expire(c) // what its idle timer calls
	if _, err := c.conn.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("an expired connection reads %v, want it closed", err)
	}
	if n := poolEntries(u); n != 0 {
		t.Fatalf("an expired connection, or its worker, stayed in the pool: %d entries", n)
	}
}

func TestUpstreamForgetsAWorkerWithNoIdleConnection(t *testing.T) {
	// Workers come and go; the pool must not keep an entry for each worker it ever reached.
	addr, _ := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	_, body, err := send(u, new(canceller), proxied(t, "GET", addr, "")) // takes the pooled connection
	if err != nil {
		t.Fatal(err)
	}
	body.Close() // before the end: the connection is closed, not given back
	if n := poolEntries(u); n != 0 {
		t.Fatalf("the pool kept %d entries after the worker's only connection was closed", n)
	}
}

func TestAWorkerClosingItsKeepAliveConnectionsCostsNoRetry(t *testing.T) {
	// Contract: Worker failures, "Deadlines and connections": a pooled connection the worker
	// closed is replaced before it is used; the request reaches the worker once, and no retry or
	// failure is counted.
	got, closed := make(chan []byte, 4), make(chan struct{}, 4)
	addr, accepted := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		if raw, err := readRaw(br); err == nil {
			got <- raw
			io.WriteString(conn, okAnswer) // keep-alive, then closed all the same
		}
		conn.Close()
		closed <- struct{}{}
	})
	g := start(t, newRouter(t, "http://"+addr), Options{})
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("POST", "http://"+g.Addr()+"/v1/completions", strings.NewReader(`{"prompt":"p"}`))
		if res, body := do(t, req, nil); res.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
		<-got
		<-closed // on loopback the close has reached the gateway's socket when it returns
	}
	for reason := range g.retries {
		if n := g.retries[reason].Load(); n != 0 {
			t.Fatalf("%d retries for %s", n, retryReasonNames[reason])
		}
	}
	if n := accepted.Load(); n != 3 || len(got) != 0 {
		t.Fatalf("%d connections and %d more requests, want 3 and none", n, len(got))
	}
}

func TestUpstreamResendsAReplayableRequestTheWorkerDroppedUnanswered(t *testing.T) {
	// Each connection answers its first request and drops its second one unanswered: a POST with
	// an Idempotency-Key sent on the pooled connection is sent again, body and all, on a new one.
	got := make(chan []byte, 4)
	addr, accepted := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		for i := 0; i < 2; i++ {
			raw, err := readRaw(br)
			if err != nil {
				return
			}
			got <- raw
			if i == 0 {
				io.WriteString(conn, okAnswer)
			}
		}
	})
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	<-got
	req := proxiedTo(t, "http://"+addr, "POST", "Idempotency-Key: k1\r\n", "again")
	if answer := roundTrip(t, u, req); answer != "200 OK ok" {
		t.Fatal(answer)
	}
	first, second := <-got, <-got
	if !bytes.Equal(first, second) || !bytes.HasSuffix(second, []byte("again")) {
		t.Fatalf("the resent request differs:\n%q\n%q", first, second)
	}
	if n := accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestUpstreamDialsTheDefaultPortOfAPortlessWorkerURL(t *testing.T) {
	// A normalised worker URL drops the scheme's default port; net/http's Transport dials it
	// (canonicalAddr), and so must upstream; an internationalised name is dialed and written in
	// its ASCII form (IDNA, RFC 5891). No test may listen on port 80 or resolve a name, so each
	// dial is recorded and sent to a loopback worker instead.
	got := make(chan []byte, 1)
	addr, _ := rawWorker(t, answering(okAnswer, got))
	for _, c := range []struct{ host, dialed, hostHeader string }{
		{"127.0.0.1", "127.0.0.1:80", "127.0.0.1"},
		{"127.0.0.1:", "127.0.0.1:80", "127.0.0.1"}, // an empty port is no port
		{"[::1]", "[::1]:80", "[::1]"},              // an address is not a name: no IDNA
		{"127.0.0.1:8080", "127.0.0.1:8080", "127.0.0.1:8080"},
		{"[::1]:9", "[::1]:9", "[::1]:9"},
		{"sglang_worker:30000", "sglang_worker:30000", "sglang_worker:30000"}, // a container's name, kept as it is
		{"bücher.example", "xn--bcher-kva.example:80", "xn--bcher-kva.example"},
	} {
		var dialed []string
		record := func(ctx context.Context, network, address string) (net.Conn, error) {
			dialed = append(dialed, address)
			return net.Dial("tcp", addr)
		}
		rt, u := newTransport(), newUpstream(4)
		u.dial, rt.DialContext = record, record
		if answer := transportRoundTrip(t, rt, transportRequest(t, "GET", c.host, "")); answer != "200 OK ok" {
			t.Fatalf("%s, Transport: %q", c.host, answer)
		}
		want := parseRequest(t, <-got)
		if answer := roundTrip(t, u, proxied(t, "GET", c.host, "")); answer != "200 OK ok" {
			t.Fatalf("%s, upstream: %q", c.host, answer)
		}
		if sent := parseRequest(t, <-got); sent.Host != c.hostHeader || want.Host != c.hostHeader {
			t.Fatalf("%s: the worker got Host %q from upstream, %q from the Transport, want %q", c.host, sent.Host, want.Host, c.hostHeader)
		}
		if want := []string{c.dialed, c.dialed}; !slices.Equal(dialed, want) {
			t.Errorf("%s: the Transport, then upstream dialed %q, want %q", c.host, dialed, want)
		}
		rt.CloseIdleConnections()
		u.CloseIdleConnections()
	}
}

// earlyAnswerer is a worker that reads a request's header only, answers 401 with Connection:
// close and closes: the body it leaves unread makes the kernel reset the connection, so a
// gateway still writing the body gets a write error while the answer waits in its socket.
func earlyAnswerer(conn net.Conn) {
	answerAfterTheHeader(conn, "HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: 6\r\n\r\nno key")
}

// answerAfterTheHeader reads a request's header, none of its body, and writes answer.
func answerAfterTheHeader(conn net.Conn, answer string) {
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	io.WriteString(conn, answer)
}

func TestAnAnswerBeforeTheBodyWasReadReachesTheClient(t *testing.T) {
	// A worker may answer a POST before reading its body (a 401 for a missing key) and close;
	// the gateway passes that answer on, whatever its write of the body met (contract: Worker
	// failures, "Deadlines and connections"). The breaker is off so that each try is counted
	// on its own; 200 tries per size, on both sides of upstreamMaxBody.
	addr, _ := rawWorker(t, earlyAnswerer)
	config := core.DefaultConfig("http://" + addr)
	config.Breaker = &core.BreakerConfig{Disabled: true}
	router, err := core.NewRouter(config)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, router, Options{})
	c := client()
	for _, size := range []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
		body := strings.Repeat("x", size)
		lost := map[int]int{}
		for try := 0; try < 200; try++ {
			res, err := c.Post("http://"+g.Addr()+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized || string(answer) != "no key" {
				lost[res.StatusCode]++
			}
		}
		if len(lost) > 0 {
			t.Errorf("a %d-byte body: of 200 early 401s, lost (by the status the client got instead): %v", size, lost)
		}
	}
}

// answeringThenClosing serves each request on a connection with answer, and closes the
// connection after it when closes.
func answeringThenClosing(answer string, closes bool) func(net.Conn) {
	if !closes {
		return answering(answer, nil)
	}
	return func(conn net.Conn) {
		if _, err := readRaw(bufio.NewReader(conn)); err == nil {
			io.WriteString(conn, answer)
		}
	}
}

// answerRead is an answer as its reader sees it: status, body, the X-Sum trailer, and the error
// the body's read ended with.
func answerRead(status, body, trailer string, err error) string {
	return strings.Join([]string{status, body, trailer, errString(err)}, "|") + "; "
}

func TestUpstreamEndsAnswersAndReusesConnectionsAsTheTransportDoes(t *testing.T) {
	// Two requests in a row through each transport: the answers the caller reads (status, body,
	// trailers) and the connections the worker accepted must be the Transport's; the counts are
	// HTTP/1.1's rules (RFC 9112 6.3, 9.3), written by hand. The client's Connection: close is
	// hop-by-hop (contract: HTTP proxies, step 5): it closes no connection to the worker, as the
	// ReverseProxy in front of the Transport took it out.
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 7\r\n\r\n"
	for _, c := range []struct {
		name, method, answer, clientExtra string
		closes                            bool
		conns                             int32
	}{
		{"a HEAD answered with a length and no body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "", false, 1},
		{"a 304 with a length and no body", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "", false, 1},
		{"a 204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", "", false, 1},
		{"a 304 without a length", "GET", "HTTP/1.1 304 Not Modified\r\n\r\n", "", false, 1},
		{"a chunked body with a trailer", "GET", chunked, "", false, 1},
		{"a body without a length, ended by the close", "GET", "HTTP/1.1 200 OK\r\n\r\nok", "", true, 2},
		{"Connection: close from the worker", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "", true, 2},
		{"Connection: close from the client", "GET", okAnswer, "Connection: close\r\n", false, 1},
		{"a body cut short by the close", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok", "", true, 2},
		{"HTTP/1.0 with keep-alive", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", "", false, 1},
	} {
		var answers [2]string
		addr, accepted := rawWorker(t, answeringThenClosing(c.answer, c.closes))
		rt := newTransport()
		for try := 0; try < 2; try++ {
			res, err := rt.RoundTrip(transportRequest(t, c.method, addr, ""))
			if err != nil {
				t.Fatalf("%s, Transport, try %d: %v", c.name, try, err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			answers[0] += answerRead(res.Status, string(body), res.Trailer.Get("X-Sum"), err)
		}
		rt.CloseIdleConnections()
		upAddr, upAccepted := rawWorker(t, answeringThenClosing(c.answer, c.closes))
		u := newUpstream(4)
		for try := 0; try < 2; try++ {
			res, body, err := send(u, new(canceller), proxiedTo(t, "http://"+upAddr, c.method, c.clientExtra, ""))
			if err != nil {
				t.Fatalf("%s, upstream, try %d: %v", c.name, try, err)
			}
			b, err := io.ReadAll(body)
			body.Close()
			status := strconv.Itoa(res.StatusCode()) + " " + string(res.Header.StatusMessage())
			answers[1] += answerRead(status, string(b), string(res.Header.Peek("X-Sum")), err)
		}
		u.CloseIdleConnections()
		if n, m := accepted.Load(), upAccepted.Load(); n != c.conns || m != c.conns {
			t.Errorf("%s: the Transport took %d connections, upstream %d, want %d", c.name, n, m, c.conns)
		}
		if answers[0] != answers[1] {
			t.Errorf("%s: the Transport read %q, upstream %q", c.name, answers[0], answers[1])
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestUpstreamSendsAChunkedUploadWithItsLength(t *testing.T) {
	// The gateway reads a client's chunked body whole, so the worker gets it with a
	// Content-Length, without the client's chunked framing, its Trailer header or its trailers
	// (contract: HTTP proxies, step 5): what the Transport sends for the same body of known length.
	got := make(chan []byte, 2)
	addr, _ := rawWorker(t, answering(okAnswer, got))
	body := `{"prompt":"p"}`
	if answer := transportRoundTrip(t, newTransport(), transportRequest(t, "POST", addr, body)); answer != "200 OK ok" {
		t.Fatal(answer)
	}
	want := parseRequest(t, <-got)
	req := proxiedTo(t, "http://"+addr, "POST", "Transfer-Encoding: chunked\r\nTrailer: X-Sum\r\n", "")
	req.body = []byte(body) // the chunks, as the gateway's server joined them
	if answer := roundTrip(t, newUpstream(4), req); answer != "200 OK ok" {
		t.Fatal(answer)
	}
	if sent := parseRequest(t, <-got); !reflect.DeepEqual(sent, want) {
		t.Fatalf("upstream wrote\n%+v\nthe Transport\n%+v", sent, want)
	}
}

func TestUpstreamHearsAnAnswerWhileALargeBodyIsStillGoing(t *testing.T) {
	// The worker answers after the header and reads nothing more, keeping the connection open; a
	// 16 MiB body cannot be written in full (the socket buffers fill). The Transport returns the
	// answer while it writes, and so must upstream (writing first would wait until the worker
	// closes), and the connection, written in part, is not pooled.
	held := make(chan struct{})
	addr, _ := rawWorker(t, func(conn net.Conn) {
		answerAfterTheHeader(conn, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 6\r\n\r\nno key")
		<-held // open, reading nothing, until the test ends
	})
	t.Cleanup(func() { close(held) })
	body := strings.Repeat("x", 16<<20)
	rt, u := newTransport(), newUpstream(4)
	results := make(chan string, 2)
	go func() {
		res, err := rt.RoundTrip(transportRequest(t, "POST", addr, body))
		if err != nil {
			results <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		results <- string(b)
	}()
	go func() {
		_, b, err := send(u, new(canceller), proxied(t, "POST", addr, body))
		results <- answerText(b, err)
	}()
	for i := 0; i < 2; i++ {
		select {
		case answer := <-results:
			if answer != "no key" {
				t.Errorf("%q, want the 401's body", answer)
			}
		case <-time.After(10 * time.Second): // a bound on the wait, not a measurement
			t.Fatal("no answer while the body was still being written")
		}
	}
	rt.CloseIdleConnections()
	if n := poolEntries(u); n != 0 {
		t.Fatalf("a connection whose body was never written in full was pooled (%d entries)", n)
	}
}

func TestUpstreamEndsTheWriteOfABodyWithItsAnswer(t *testing.T) {
	// The client's body is fasthttp's buffer, which it reuses for the client's next request once
	// the answer is sent: a write of it still under way when the worker's answer has ended (read
	// to its end, or closed) would read the next request's bytes, or send them to this worker, and
	// one that has failed on its own must still be waited for (-race sees no order otherwise).
	// The workers answer a 16 MiB body after its header and read none of it: one holds the
	// connection open, the other closes it (Connection: close).
	held := make(chan struct{})
	holding, _ := rawWorker(t, func(conn net.Conn) {
		answerAfterTheHeader(conn, okAnswer)
		<-held
	})
	t.Cleanup(func() { close(held) })
	closing, _ := rawWorker(t, earlyAnswerer)
	for _, c := range []struct {
		addr    string
		readAll bool
	}{{holding, true}, {holding, false}, {closing, true}, {closing, false}} {
		req := proxied(t, "POST", c.addr, strings.Repeat("x", 16<<20))
		_, body, err := send(newUpstream(4), new(canceller), req)
		if err != nil {
			t.Fatal(err)
		}
		if c.readAll {
			io.ReadAll(body)
		}
		body.Close()
		if body.(*upstreamBody).c.wrote != nil {
			t.Errorf("%+v: the body's write was not waited for", c)
		}
		clear(req.body) // what fasthttp's reuse of the buffer does
	}
}

func TestMaxConnsPerHostBoundsTheConnectionsToAWorker(t *testing.T) {
	// max_conns_per_host = 1 (contract: Deadlines and connections): eight requests at once share
	// one connection, one after the other (upstream's connSlots).
	addr, accepted := rawWorker(t, answering(okAnswer, nil))
	g := start(t, newRouter(t, "http://"+addr), Options{MaxConnsPerHost: 1})
	done := make(chan string, 8)
	for i := 0; i < 8; i++ {
		go func() {
			res, err := client().Post("http://"+g.Addr()+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"p"}`))
			if err != nil {
				done <- err.Error()
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			done <- string(b)
		}()
	}
	for i := 0; i < 8; i++ {
		if got := <-done; got != "ok" {
			t.Fatal(got)
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("eight requests at once took %d connections, want max_conns_per_host = 1", n)
	}
}

// slotsUsed is how many connections slots counts open, by worker.
func slotsUsed(s *connSlots) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.used)
}

func TestUpstreamGivesBackTheSlotOfADialThatFailed(t *testing.T) {
	// It replaces the Transport's rule that a request it could not send has its body closed:
	// a body is in memory now, and what a failed dial must not keep is its place among the
	// worker's connections, or max_conns_per_host failed dials would block the worker for good.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	u := newUpstream(4)
	u.slots = &connSlots{max: 1}
	for try := 0; try < 3; try++ {
		if _, _, err := send(u, new(canceller), proxied(t, "POST", refused, "body")); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("try %d to a refused port: %v, want ECONNREFUSED", try, err)
		}
	}
	if used := slotsUsed(u.slots); len(used) != 0 {
		t.Fatalf("after three failed dials the slots count %v open", used)
	}
}

func TestALargeBodyAnsweredEarlyWith503IsRetriedWhole(t *testing.T) {
	// The first try's worker answers 503 after the header of a 1 MiB body and closes while the
	// body is still being written; the retry goes to the other worker, which must get the whole
	// body (while the first try's write may still be ending).
	var first atomic.Bool
	got := make(chan []byte, 2)
	serve := func(conn net.Conn) {
		if first.CompareAndSwap(false, true) {
			answerAfterTheHeader(conn, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbusy")
			return
		}
		answering(okAnswer, got)(conn)
	}
	a, _ := rawWorker(t, serve)
	b, _ := rawWorker(t, serve)
	g := start(t, newRouter(t, "http://"+a, "http://"+b), Options{})
	body := strings.Repeat("x", 1<<20)
	req, _ := http.NewRequest("POST", "http://"+g.Addr()+"/v1/completions", strings.NewReader(body))
	res, answer := do(t, req, nil)
	if res.StatusCode != 200 || answer != "ok" {
		t.Fatalf("%d %q", res.StatusCode, answer)
	}
	if raw := <-got; !bytes.HasSuffix(raw, []byte("\r\n\r\n"+body)) {
		t.Fatalf("the retry's worker got %d bytes, not the header and the whole body", len(raw))
	}
	if n := g.retries[retryStatus].Load(); n != 1 {
		t.Fatalf("%d retries for status, want 1", n)
	}
}

// TestUpstreamBodyKeepsFailingAndTakesACloseDuringARead: a body cut short fails every read after
// the first failure (a second reader must not see a clean end), and a Close while a Read waits
// (net/http's bodies allow it) ends the read and drops the connection once (run with -race).
func TestUpstreamBodyKeepsFailingAndTakesACloseDuringARead(t *testing.T) {
	cut, _ := rawWorker(t, func(conn net.Conn) {
		if _, err := readRaw(bufio.NewReader(conn)); err == nil {
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcde")
		}
	})
	_, body, err := send(newUpstream(4), new(canceller), proxied(t, "GET", cut, ""))
	if err != nil {
		t.Fatal(err)
	}
	_, failure := io.ReadAll(body)
	if failure == nil {
		t.Fatal("a body cut short read to a clean end")
	}
	if _, err := body.Read(make([]byte, 4)); err != failure {
		t.Fatalf("a read after the failure: %v, want the same failure (%v)", err, failure)
	}
	body.Close()
	release := make(chan struct{})
	held, _ := rawWorker(t, func(conn net.Conn) {
		if _, err := readRaw(bufio.NewReader(conn)); err == nil {
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
			<-release
		}
	})
	defer close(release)
	u := newUpstream(4)
	_, body, err = send(u, new(canceller), proxied(t, "GET", held, ""))
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error)
	go func() { _, err := io.ReadAll(body); read <- err }()
	body.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("a read cut by Close ended cleanly")
		}
	case <-time.After(5 * time.Second): // a bound on the wait, not a measurement
		t.Fatal("Close did not end the read in 5 s")
	}
	if n := poolEntries(u); n != 0 {
		t.Fatalf("%d pool entries after a body closed early", n)
	}
}

// TestAClientLeavingMidStreamLogsNothing: the worker's body read that the client's departure cuts
// fails with the try's cause, which the gateway does not log; the closed connection's own error
// would log every departure.
func TestAClientLeavingMidStreamLogsNothing(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := newRouter(t, heldStream(t, release, nil).URL)
	g := start(t, r, Options{})
	var logs syncBuffer
	g.errorLog.SetOutput(&logs)
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	if _, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, r, 1)
	conn.Close()
	waitLeases(t, r, 0) // the handler has returned: anything it logs is written
	if s := logs.String(); s != "" {
		t.Fatalf("the gateway logged a client's departure: %q", s)
	}
}

// TestUpstreamACancelledTryTakesNoConnection: a try cancelled before it starts (the client left,
// the waiting list re-routed it) fails with its cause and leaves the pooled connection pooled,
// where taking it would have closed a healthy connection.
func TestUpstreamACancelledTryTakesNoConnection(t *testing.T) {
	addr, accepted := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	try := new(canceller)
	try.cancel(nil)
	if _, _, err := send(u, try, proxied(t, "GET", addr, "")); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled try: %v, want context.Canceled", err)
	}
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	if n := accepted.Load(); n != 1 {
		t.Fatalf("%d connections accepted, want the pooled one reused", n)
	}
}

func TestUpstreamSpeaksTLSToAnHTTPSWorker(t *testing.T) {
	// An https:// worker is reached over crypto/tls, its certificate verified against its name
	// (here 127.0.0.1, which httptest's certificate holds), and its connection pooled as any.
	w := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto+" "+r.Host+" "+r.RemoteAddr)
	}))
	w.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting client's refused handshake
	t.Cleanup(w.Close)
	roots := x509.NewCertPool()
	roots.AddCert(w.Certificate())
	u := newUpstream(4)
	u.rootCAs = roots
	host := strings.TrimPrefix(w.URL, "https://")
	first := roundTrip(t, u, proxiedTo(t, w.URL, "GET", "", ""))
	if !strings.HasPrefix(first, "200 OK HTTP/1.1 "+host+" ") {
		t.Fatalf("an https:// worker answered %q", first)
	}
	if again := roundTrip(t, u, proxiedTo(t, w.URL, "GET", "", "")); again != first {
		t.Fatalf("the second request (same client address: the pooled connection) got %q, the first %q", again, first)
	}
	untrusting := newUpstream(4) // the system's roots know nothing of httptest's certificate
	var unknown x509.UnknownAuthorityError
	if _, _, err := send(untrusting, new(canceller), proxiedTo(t, w.URL, "GET", "", "")); !errors.As(err, &unknown) {
		t.Fatalf("a certificate nobody trusts: %v, want x509.UnknownAuthorityError", err)
	}
}

// headAnswer is an answer whose head, status line to the blank line, is size bytes long: its
// X-Big value takes what the rest leaves.
func headAnswer(size int) string {
	return bigHeadStart + strings.Repeat("a", bigValue(size)) + bigHeadEnd + "ok"
}

const bigHeadStart, bigHeadEnd = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Big: ", "\r\n\r\n"

func bigValue(size int) int { return size - len(bigHeadStart) - len(bigHeadEnd) }

func TestUpstreamGrowsItsBufferForALargeResponseHeader(t *testing.T) {
	// A head larger than the buffer's first size is read whole (the buffer doubles), and the
	// connection goes on serving the next answers with the grown buffer.
	for _, size := range []int{headerBufferSize + 1, 100 << 10, maxResponseHeader} {
		got := make(chan []byte, 3)
		addr, accepted := rawWorker(t, answering(headAnswer(size), got))
		u := newUpstream(4)
		for try := 0; try < 3; try++ {
			res, body, err := send(u, new(canceller), proxied(t, "GET", addr, ""))
			if err != nil {
				t.Fatalf("a %d-byte head, try %d: %v", size, try, err)
			}
			if text := answerText(body, nil); text != "ok" || len(res.Header.Peek("X-Big")) != bigValue(size) {
				t.Fatalf("a %d-byte head, try %d: X-Big of %d bytes, body %q", size, try, len(res.Header.Peek("X-Big")), text)
			}
			<-got
		}
		if n := accepted.Load(); n != 1 {
			t.Fatalf("a %d-byte head: %d connections for three answers, want 1", size, n)
		}
	}
}

// TestUpstreamBoundsTheHeadersOf1xxNobodyTakes: with nobody to take them (an HTTP/1.0 client),
// the 1xx heads and the final one share one bound, as in Go 1.26's Transport, which resets its
// bound only for a 1xx a trace took: five 1xx of a quarter of the bound each pass it.
func TestUpstreamBoundsTheHeadersOf1xxNobodyTakes(t *testing.T) {
	hint := "HTTP/1.1 103 Early Hints\r\nLink: " + strings.Repeat("a", maxResponseHeader/4) + "\r\n\r\n"
	addr, _ := rawWorker(t, answering(strings.Repeat(hint, 5)+okAnswer, nil))
	if _, _, err := send(newUpstream(4), new(canceller), proxied(t, "GET", addr, "")); err != errResponseHeaderTooLarge {
		t.Fatalf("five 1xx of a quarter of the bound each, nobody to take them: %v, want %v", err, errResponseHeaderTooLarge)
	}
	taken := proxied(t, "GET", addr, "")
	taken.informational = func(*fasthttp.ResponseHeader) error { return nil }
	if answer := roundTrip(t, newUpstream(4), taken); answer != "200 OK ok" {
		t.Fatalf("the same 1xx passed on: %q", answer)
	}
}

func TestUpstreamBoundsTheResponseHeader(t *testing.T) {
	// maxResponseHeader (1 MiB) is the bound: a head one byte over it is refused.
	addr, _ := rawWorker(t, answering(headAnswer(maxResponseHeader+1), nil))
	if _, _, err := send(newUpstream(4), new(canceller), proxied(t, "GET", addr, "")); err != errResponseHeaderTooLarge {
		t.Fatalf("a head of 1 MiB and a byte: %v, want %v", err, errResponseHeaderTooLarge)
	}
}

func TestUpstreamReadsNoBodyForAHeadA204OrA304(t *testing.T) {
	// RFC 9112 6.3: the answer to a HEAD, a 204 and a 304 end with their head, whatever length
	// they announce; the connection is back in the pool before the body is read (there is
	// none), and the next answer on it is read right. A HEAD's Content-Length is kept (contract:
	// HTTP proxies).
	for _, c := range []struct{ method, answer string }{
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"},
		{"GET", "HTTP/1.1 204 No Content\r\n\r\n"},
		{"GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"},
		{"GET", "HTTP/1.1 304 Not Modified\r\n\r\n"},
	} {
		addr, accepted := rawWorker(t, func(conn net.Conn) {
			br := bufio.NewReader(conn)
			for i := 0; ; i++ {
				if _, err := readRaw(br); err != nil {
					return
				}
				if i == 0 {
					io.WriteString(conn, c.answer)
				} else {
					io.WriteString(conn, okAnswer)
				}
			}
		})
		u := newUpstream(4)
		res, body, err := send(u, new(canceller), proxied(t, c.method, addr, ""))
		if err != nil {
			t.Fatal(err)
		}
		if n := pooled(u, addr); n != 1 {
			t.Errorf("%q: %d connections pooled before the body was read, want 1", c.answer, n)
		}
		if c.method == "HEAD" && res.Header.ContentLength() != 10 {
			t.Errorf("a HEAD's Content-Length became %d", res.Header.ContentLength())
		}
		if n, err := body.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Errorf("%q: the body read %d bytes, %v; want none and io.EOF", c.answer, n, err)
		}
		body.Close()
		if answer := roundTrip(t, u, proxied(t, "GET", addr, "")); answer != "200 OK ok" || accepted.Load() != 1 {
			t.Errorf("%q: the next answer on the connection read %q (%d connections)", c.answer, answer, accepted.Load())
		}
	}
}

func TestConnSlotsBoundEachWorkerAndSayWhenToLookAgain(t *testing.T) {
	s := &connSlots{max: 2}
	for _, addr := range []string{"a", "a", "b"} {
		if free, _ := s.take(addr); !free {
			t.Fatalf("no place for %s", addr)
		}
	}
	changedAt := func(what string, change func()) {
		t.Helper()
		free, changed := s.take("a")
		if free {
			t.Fatal("a third place for a worker with max 2")
		}
		change()
		select {
		case <-changed:
		default:
			t.Fatalf("%s did not say so to a try waiting for a place", what)
		}
	}
	changedAt("a connection pooled", s.pooled)
	changedAt("another worker's place freed", func() { s.give("b") }) // the try looks again, and waits on
	changedAt("a place freed", func() { s.give("a") })
	if free, _ := s.take("a"); !free {
		t.Fatal("no place after one was freed")
	}
	if used := slotsUsed(s); !maps.Equal(used, map[string]int{"a": 2}) {
		t.Fatalf("places used %v, want a: 2 (b forgotten at 0)", used)
	}
}

func TestUpstreamAFreshConnectionAtTheBoundTakesAnIdleOnesPlace(t *testing.T) {
	// A request sent again goes on a new connection (get with fresh); at max_conns_per_host
	// with the worker's only place held by an idle connection, that one is closed for it, where
	// waiting would last until the idle one expired.
	addr, accepted := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	u.slots = &connSlots{max: 1}
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	c, err := u.get(new(canceller), proxied(t, "GET", addr, "").target, true)
	if err != nil {
		t.Fatal(err)
	}
	defer u.discard(c)
	if n := pooled(u, addr); n != 0 || c.timer != nil {
		t.Fatalf("%d pooled, the connection got was pooled before: %v; want the idle one closed for a new one", n, c.timer != nil)
	}
	eventually(t, "the worker accepts the new connection", func() bool { return accepted.Load() == 2 })
}

func TestUpstreamWaitsForAPlaceWithMaxConnsPerHost(t *testing.T) {
	// With one place per worker, a try that waits while another holds the worker's connection
	// (its body unread) gives up when cancelled, and else takes that connection when it is
	// given back to the pool, as the Transport hands an idle connection to a request waiting
	// under MaxConnsPerHost: the place is the connection's.
	addr, accepted := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	u.slots = &connSlots{max: 1}
	_, body, err := send(u, new(canceller), proxied(t, "GET", addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	try := new(canceller)
	cancelled, second := make(chan error, 1), make(chan string, 1)
	go func() {
		_, _, err := send(u, try, proxied(t, "GET", addr, ""))
		cancelled <- err
	}()
	waitForAPlace := func(what string) {
		t.Helper()
		eventually(t, what+" waits for a place", func() bool {
			u.slots.mu.Lock()
			defer u.slots.mu.Unlock()
			return u.slots.changed != nil
		})
	}
	waitForAPlace("a try")
	try.cancel(errWorkerDown)
	if err := <-cancelled; err != errWorkerDown {
		t.Fatalf("a try cancelled while it waited for a place: %v", err)
	}
	go func() {
		_, b, err := send(u, new(canceller), proxied(t, "GET", addr, ""))
		second <- answerText(b, err)
	}()
	waitForAPlace("another try")
	if text := answerText(body, nil); text != "ok" {
		t.Fatal(text)
	}
	select {
	case text := <-second:
		if text != "ok" || accepted.Load() != 1 {
			t.Fatalf("the waiting try read %q on %d connections, want ok on the one given back", text, accepted.Load())
		}
	case <-time.After(10 * time.Second): // a bound on the wait, not a measurement
		t.Fatal("the waiting try did not take the connection given back to the pool")
	}
	u.CloseIdleConnections()
	if used := slotsUsed(u.slots); len(used) != 0 {
		t.Fatalf("with every connection closed the slots count %v", used)
	}
}
