package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
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
	fallback := &http.Transport{Proxy: nil, DisableCompression: true}
	return &upstream{dial: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, maxIdle: maxIdle, idleTimeout: time.Minute, fallback: fallback}
}

// proxied is a request as the gateway's rewrite leaves it: an opaque raw path and query, the
// client's headers with an empty User-Agent (the ReverseProxy's, so none is added), a body
// from memory.
func proxied(t *testing.T, method, addr, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body, req.GetBody, req.ContentLength = nil, nil, 0
	}
	req.URL.Opaque, req.URL.RawQuery = "/v1/a%2Fb//c", "x=1&&y"
	req.Header["User-Agent"] = []string{""}
	req.Header["X-Smg-Routing-Key"] = []string{"user-1"}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["X-Twice"] = []string{"a", "b"}
	return req
}

// answerText is an answer's body, read to its end, or the error that came instead.
func answerText(res *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return string(body)
}

func roundTrip(t *testing.T, rt http.RoundTripper, req *http.Request) string {
	t.Helper()
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status + " " + string(body)
}

func TestUpstreamWritesWhatTheTransportWrites(t *testing.T) {
	// The expected bytes are what net/http's Transport sends for the same request.
	got := make(chan []byte, 4)
	addr, _ := rawWorker(t, answering(okAnswer, got))
	u := newUpstream(4)
	for _, c := range []struct{ method, body string }{{"POST", `{"prompt":"hi"}`}, {"GET", ""}, {"DELETE", ""}} {
		if answer := roundTrip(t, u.fallback, proxied(t, c.method, addr, c.body)); answer != "200 OK ok" {
			t.Fatalf("Transport: %q", answer)
		}
		want := <-got
		if answer := roundTrip(t, u, proxied(t, c.method, addr, c.body)); answer != "200 OK ok" {
			t.Fatalf("upstream: %q", answer)
		}
		if sent := <-got; !bytes.Equal(sent, want) {
			t.Fatalf("%s: upstream wrote\n%q\nthe Transport\n%q", c.method, sent, want)
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
	res, err := u.RoundTrip(proxied(t, "GET", addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close() // before the end: the connection cannot be reused
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	if n := accepted.Load(); n != 2 {
		t.Fatalf("after an early close: %d connections, want 2", n)
	}
}

func TestUpstreamGivesBackAConnectionOnlyWhenNothingFollowsTheAnswer(t *testing.T) {
	for _, c := range []struct {
		answer string
		pooled int
	}{
		{"HTTP/1.1 204 No Content\r\n\r\n", 1}, // no body: back at once
		{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 0},
		{okAnswer + "HTTP/1.1 200 OK\r\n", 0}, // bytes nobody asked for
		{"HTTP/1.0 200 OK\r\n\r\nok", 0},      // a body that ends with the connection
	} {
		addr, _ := rawWorker(t, func(conn net.Conn) {
			br := bufio.NewReader(conn)
			if _, err := readRaw(br); err == nil {
				io.WriteString(conn, c.answer)
			}
			if strings.HasPrefix(c.answer, "HTTP/1.0") {
				return
			}
			readRaw(br) // hold the connection open until the client closes it
		})
		u := newUpstream(4)
		roundTrip(t, u, proxied(t, "GET", addr, ""))
		u.mu.Lock()
		pooled := len(u.idle[addr])
		u.mu.Unlock()
		if pooled != c.pooled {
			t.Errorf("%q: %d pooled connections, want %d", c.answer, pooled, c.pooled)
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
		go func() { done <- answerText(u.RoundTrip(proxied(t, "GET", addr, ""))) }()
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
	u.mu.Lock()
	defer u.mu.Unlock()
	if n := len(u.idle[addr]); n != 2 {
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
	ctx, cancel := context.WithCancelCause(context.Background())
	req := proxied(t, "POST", addr, "body").WithContext(ctx)
	result := make(chan error, 1)
	go func() {
		_, err := u.RoundTrip(req)
		result <- err
	}()
	<-received // the try waits for its answer
	cancel(errWorkerDown)
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
	// Wait (bounded) until the worker's close is visible on the pooled connection.
	for i := 0; i < 1000; i++ {
		u.mu.Lock()
		c := u.idle[addr][0]
		u.mu.Unlock()
		if !idleAndOpen(c.conn) {
			break
		}
		time.Sleep(time.Millisecond)
	}
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
	// net/http's shouldRetryRequest for a request that failed on a reused connection.
	withKey := func(req *http.Request) *http.Request { req.Header.Set("Idempotency-Key", "1"); return req }
	noRewind := func(req *http.Request) *http.Request { req.GetBody = nil; return req }
	for _, c := range []struct {
		name          string
		req           *http.Request
		written, read int64
		want          bool
	}{
		{"POST, nothing written", proxied(t, "POST", "w", "b"), 0, 0, true},
		{"POST written, nothing read", proxied(t, "POST", "w", "b"), 100, 0, false},
		{"POST with an Idempotency-Key, nothing read", withKey(proxied(t, "POST", "w", "b")), 100, 0, true},
		{"GET written, nothing read", proxied(t, "GET", "w", ""), 100, 0, true},
		{"GET, part of an answer read", proxied(t, "GET", "w", ""), 100, 5, false},
		{"POST without GetBody, nothing written", noRewind(proxied(t, "POST", "w", "b")), 0, 0, false},
	} {
		conn := &upstreamConn{io: countedConn{written: c.written, read: c.read}}
		if got := conn.shouldRetry(c.req); got != c.want {
			t.Errorf("%s: retried %v, want %v", c.name, got, c.want)
		}
	}
}

func TestUpstreamPassesInformationalAnswersToTheTrace(t *testing.T) {
	hints := "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
	for _, c := range []struct {
		n1xx    int
		wantErr string
	}{{1, ""}, {5, ""}, {6, ""}, {40, ""}} { // no bound once a trace takes them (Go 1.26's Transport)
		addr, _ := rawWorker(t, answering(strings.Repeat(hints, c.n1xx)+okAnswer, nil))
		var seen []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			seen = append(seen, strconv.Itoa(code)+" "+h.Get("Link"))
			return nil
		}}
		req := proxied(t, "GET", addr, "")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		res, err := newUpstream(4).RoundTrip(req)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("%d 1xx: %v, want %q", c.n1xx, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || len(seen) != c.n1xx || seen[0] != "103 </style.css>; rel=preload" {
			t.Fatalf("%d 1xx: status %d, trace saw %q", c.n1xx, res.StatusCode, seen)
		}
	}
}

func TestUpstreamBoundsTheResponseHeader(t *testing.T) {
	huge := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", maxResponseHeader) + "\r\n\r\n"
	addr, _ := rawWorker(t, answering(huge, nil))
	_, err := newUpstream(4).RoundTrip(proxied(t, "GET", addr, ""))
	if err == nil || !strings.Contains(err.Error(), "server response headers exceeded 10485760 bytes") {
		t.Fatalf("a header over the bound: %v", err)
	}
}

func TestUpstreamHandsOverAnUpgradedConnection(t *testing.T) {
	addr, _ := rawWorker(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		if _, err := readRaw(br); err != nil {
			return
		}
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(conn, br) // echoes until the gateway closes
	})
	req := proxied(t, "GET", addr, "")
	req.Header["Connection"], req.Header["Upgrade"] = []string{"Upgrade"}, []string{"echo"}
	res, err := newUpstream(4).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	rw, ok := res.Body.(io.ReadWriteCloser)
	if res.StatusCode != http.StatusSwitchingProtocols || !ok {
		t.Fatalf("status %d, body %T: want 101 and an io.ReadWriteCloser", res.StatusCode, res.Body)
	}
	defer rw.Close()
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

// poolEntries is how many workers upstream's idle pool holds an entry for.
func poolEntries(u *upstream) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.idle)
}

func TestUpstreamForgetsAWorkerWithNoIdleConnection(t *testing.T) {
	// Workers come and go; the pool must not keep an entry for each worker it ever reached.
	addr, _ := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	res, err := u.RoundTrip(proxied(t, "GET", addr, "")) // takes the pooled connection
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close() // before the end: the connection is closed, not given back
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
	req := proxied(t, "POST", addr, "again")
	req.Header.Set("Idempotency-Key", "k1")
	body := req.Body
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
	if req.Body != body {
		t.Fatal("the caller's request was changed")
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
		{"[::1]", "[::1]:80", "[::1]"},
		{"127.0.0.1:8080", "127.0.0.1:8080", "127.0.0.1:8080"},
		{"[::1]:9", "[::1]:9", "[::1]:9"},
		{"bücher.example", "xn--bcher-kva.example:80", "xn--bcher-kva.example"},
	} {
		var dialed []string
		record := func(ctx context.Context, network, address string) (net.Conn, error) {
			dialed = append(dialed, address)
			return net.Dial("tcp", addr)
		}
		u := newUpstream(4)
		u.dial, u.fallback.DialContext = record, record
		for _, rt := range []http.RoundTripper{u.fallback, u} {
			req := proxied(t, "GET", c.host, "")
			req.Host = "" // as the gateway's rewrite leaves it: the URL's host is written
			if answer := roundTrip(t, rt, req); answer != "200 OK ok" {
				t.Fatalf("%s: %q", c.host, answer)
			}
			if raw := <-got; !bytes.Contains(raw, []byte("\r\nHost: "+c.hostHeader+"\r\n")) {
				t.Fatalf("%s: the worker got %q", c.host, raw)
			}
			u.CloseIdleConnections() // each transport dials
		}
		if want := []string{c.dialed, c.dialed}; !slices.Equal(dialed, want) {
			t.Errorf("%s: the Transport, then upstream dialed %q, want %q", c.host, dialed, want)
		}
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
	// on its own; 200 tries per size.
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

func TestUpstreamEndsAnswersAndReusesConnectionsAsTheTransportDoes(t *testing.T) {
	// Two requests in a row through each transport: the answers the caller reads (status, body,
	// trailers) and the connections the worker accepted must be the Transport's; the counts are
	// HTTP/1.1's rules (RFC 9112 6.3, 9.3), written by hand.
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 7\r\n\r\n"
	for _, c := range []struct {
		name, method, answer string
		closes, reqClose     bool
		conns                int32
	}{
		{"a HEAD answered with a length and no body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", false, false, 1},
		{"a 304 with a length and no body", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", false, false, 1},
		{"a 204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", false, false, 1},
		{"a chunked body with a trailer", "GET", chunked, false, false, 1},
		{"a body without a length, ended by the close", "GET", "HTTP/1.1 200 OK\r\n\r\nok", true, false, 2},
		{"Connection: close from the worker", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true, false, 2},
		{"Request.Close", "GET", okAnswer, false, true, 2},
		{"a body cut short by the close", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok", true, false, 2},
		{"HTTP/1.0 with keep-alive", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", false, false, 1},
	} {
		var answers [2]string
		for i, rt := range []func(u *upstream) http.RoundTripper{
			func(u *upstream) http.RoundTripper { return u.fallback },
			func(u *upstream) http.RoundTripper { return u },
		} {
			addr, accepted := rawWorker(t, answeringThenClosing(c.answer, c.closes))
			u := newUpstream(4)
			for try := 0; try < 2; try++ {
				req := proxied(t, c.method, addr, "")
				req.Close = c.reqClose
				res, err := rt(u).RoundTrip(req)
				if err != nil {
					t.Fatalf("%s, try %d: %v", c.name, try, err)
				}
				body, err := io.ReadAll(res.Body)
				res.Body.Close()
				answers[i] += strings.Join([]string{res.Status, string(body), res.Trailer.Get("X-Sum"), errString(err)}, "|") + "; "
			}
			if n := accepted.Load(); n != c.conns {
				t.Errorf("%s: transport %d took %d connections, want %d", c.name, i, n, c.conns)
			}
			u.CloseIdleConnections()
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

// opaqueBody hides its reader's type, so that net/http does not know the body's length.
type opaqueBody struct{ io.Reader }

func (opaqueBody) Close() error { return nil }

func TestUpstreamWritesAChunkedUploadAsTheTransportDoes(t *testing.T) {
	// A body of unknown length goes chunked, with its trailers; Request.Close asks the worker
	// to close. The expected bytes are the Transport's for the same request.
	got := make(chan []byte, 1)
	addr, _ := rawWorker(t, func(conn net.Conn) {
		var raw bytes.Buffer
		br := bufio.NewReader(io.TeeReader(conn, &raw))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body) // through the trailer
		got <- raw.Bytes()
		io.WriteString(conn, okAnswer)
	})
	var sent [2][]byte
	u := newUpstream(4)
	for i, rt := range []http.RoundTripper{u.fallback, u} {
		req := proxied(t, "POST", addr, "")
		req.Body, req.ContentLength, req.Close = opaqueBody{strings.NewReader(`{"prompt":"p"}`)}, -1, true
		req.Trailer = http.Header{"X-Sum": {"7"}}
		if answer := roundTrip(t, rt, req); answer != "200 OK ok" {
			t.Fatal(answer)
		}
		sent[i] = <-got
	}
	if !bytes.Equal(sent[0], sent[1]) || !bytes.Contains(sent[1], []byte("\r\nX-Sum: 7\r\n\r\n")) {
		t.Fatalf("upstream wrote\n%q\nthe Transport\n%q", sent[1], sent[0])
	}
}

func TestUpstreamHearsAnAnswerWhileABodyOfUnknownLengthIsStillComing(t *testing.T) {
	// The worker answers after the header and reads nothing more, keeping the connection open;
	// the body never ends. The Transport returns the answer while it writes, and so must
	// upstream (writing first would wait for the body forever).
	addr, _ := rawWorker(t, func(conn net.Conn) {
		earlyAnswerer(conn)
		io.Copy(io.Discard, conn) // open until the gateway closes it
	})
	u := newUpstream(4)
	for i, rt := range []http.RoundTripper{u.fallback, u} {
		pr, pw := io.Pipe()
		req := proxied(t, "POST", addr, "")
		req.Body, req.ContentLength = pr, -1
		answered := make(chan string, 1)
		go func() { answered <- answerText(rt.RoundTrip(req)) }()
		io.WriteString(pw, "the start of a body")
		select {
		case answer := <-answered:
			if answer != "no key" { // the 401's body
				t.Errorf("transport %d: %q", i, answer)
			}
		case <-time.After(10 * time.Second): // a bound on the wait, not a measurement
			t.Errorf("transport %d: no answer while the body was still coming", i)
		}
		pw.Close()
	}
	if n := poolEntries(u); n != 0 {
		t.Fatalf("a connection whose body was never written in full was pooled (%d entries)", n)
	}
}

func TestMaxConnsPerHostBoundsTheConnectionsToAWorker(t *testing.T) {
	// max_conns_per_host = 1 (contract: Deadlines and connections): eight requests at once share
	// one connection, one after the other; upstream leaves the bound to the Transport.
	addr, accepted := rawWorker(t, answering(okAnswer, nil))
	g := start(t, newRouter(t, "http://"+addr), Options{MaxConnsPerHost: 1})
	done := make(chan string, 8)
	for i := 0; i < 8; i++ {
		go func() {
			done <- answerText(client().Post("http://"+g.Addr()+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"p"}`)))
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

// closeCounter is a request body that counts its closes.
type closeCounter struct {
	io.Reader
	closes *atomic.Int32
}

func (b closeCounter) Close() error { b.closes.Add(1); return nil }

func TestUpstreamClosesTheBodyOfARequestItCouldNotSend(t *testing.T) {
	// A RoundTripper closes the request's body, even when it fails (net/http's rule): here the
	// worker's port refuses the connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	u := newUpstream(4)
	for i, rt := range []http.RoundTripper{u.fallback, u} {
		closes := new(atomic.Int32)
		req := proxied(t, "POST", refused, "body")
		req.Body = closeCounter{strings.NewReader("body"), closes}
		if _, err := rt.RoundTrip(req); err == nil {
			t.Fatalf("transport %d: a refused connection answered", i)
		}
		if n := closes.Load(); n != 1 {
			t.Errorf("transport %d closed the body %d times, want 1", i, n)
		}
	}
}

func TestALargeBodyAnsweredEarlyWith503IsRetriedWhole(t *testing.T) {
	// The first try's worker answers 503 after the header of a 1 MiB body and closes while the
	// body is still being written; the retry goes to the other worker, which must get the whole
	// body (a fresh reader, while the first try's write may still be ending).
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

// TestUpstreamBoundsTheHeadersOf1xxNobodyTakes: without a trace the 1xx and the final header
// share one bound, as the Transport's (it resets the bound only for a 1xx a trace took).
func TestUpstreamBoundsTheHeadersOf1xxNobodyTakes(t *testing.T) {
	hint := "HTTP/1.1 103 Early Hints\r\nLink: " + strings.Repeat("a", maxResponseHeader/4) + "\r\n\r\n"
	addr, _ := rawWorker(t, answering(strings.Repeat(hint, 5)+okAnswer, nil))
	_, err := newUpstream(4).RoundTrip(proxied(t, "GET", addr, ""))
	if err == nil || !strings.Contains(err.Error(), "server response headers exceeded 10485760 bytes") {
		t.Fatalf("five 1xx of a quarter of the bound each, no trace: %v", err)
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
	res, err := newUpstream(4).RoundTrip(proxied(t, "GET", cut, ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(res.Body); err != io.ErrUnexpectedEOF {
		t.Fatalf("first read of a cut body: %v", err)
	}
	if _, err := res.Body.Read(make([]byte, 4)); err != io.ErrUnexpectedEOF {
		t.Fatalf("a read after the failure: %v, want the same failure", err)
	}
	res.Body.Close()
	release := make(chan struct{})
	held, _ := rawWorker(t, func(conn net.Conn) {
		if _, err := readRaw(bufio.NewReader(conn)); err == nil {
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
			<-release
		}
	})
	defer close(release)
	u := newUpstream(4)
	res, err = u.RoundTrip(proxied(t, "GET", held, ""))
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error)
	go func() { _, err := io.ReadAll(res.Body); read <- err }()
	res.Body.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("a read cut by Close ended cleanly")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the read in 5 s")
	}
	if n := poolEntries(u); n != 0 {
		t.Fatalf("%d pool entries after a body closed early", n)
	}
}

// TestAClientLeavingMidStreamLogsNothing: the worker's body read that the client's departure cuts
// fails with the try's cause, as through the Transport (context.Canceled), which the
// ReverseProxy does not log; the closed connection's own error would log every departure.
func TestAClientLeavingMidStreamLogsNothing(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := newRouter(t, heldStream(t, release, nil).URL)
	g := start(t, r, Options{})
	var logs syncBuffer
	g.proxy.ErrorLog = log.New(&logs, "", 0)
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
// where taking it would have closed a healthy connection (found by review).
func TestUpstreamACancelledTryTakesNoConnection(t *testing.T) {
	addr, accepted := rawWorker(t, answering(okAnswer, nil))
	u := newUpstream(4)
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := u.RoundTrip(proxied(t, "GET", addr, "").WithContext(ctx)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled try: %v, want context.Canceled", err)
	}
	roundTrip(t, u, proxied(t, "GET", addr, ""))
	if n := accepted.Load(); n != 1 {
		t.Fatalf("%d connections accepted, want the pooled one reused", n)
	}
}
