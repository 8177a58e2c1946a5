package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// upstream is the gateway's transport to its workers over plain HTTP/1.1: it writes a request
// and reads its response on the calling goroutine, over a keep-alive connection from a bounded
// pool per worker, where net/http's Transport hands each request to two goroutines of its own
// (a write loop and a read loop); only a body over upstreamMaxBody is written by a goroutine
// while the response is read. The bytes on the wire are Request.Write's, the function the
// Transport writes with, and the rules it keeps are the Transport's: 1xx answers passed to the
// request's trace (any number, as Go 1.26's), a bounded response header, a connection given back only
// after a clean end of its answer, a request retried once on a new connection when a pooled one
// turns out closed before the worker read anything of it (shouldRetry), an answer sent before
// the body was read passed on even when the write failed (earlyAnswer). A cancelled try (the
// client left, the waiting list, a timeout) closes its connection. What it does not take goes
// through fallback, the Transport: https workers, a bound on connections per worker
// (Options.MaxConnsPerHost) and internationalised host names. Contract: Worker failures,
// "Deadlines and connections".
type upstream struct {
	dial        func(ctx context.Context, network, address string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	fallback    *http.Transport

	mu   sync.Mutex
	idle map[string][]*upstreamConn // worker host:port (dialAddress) -> idle connections, most recent last
}

// upstreamMaxBody is the largest request body upstream writes before it reads: a worker may
// answer a larger one before reading it all, and writing first could block until the worker
// closes, where the Transport, reading while it writes, returns the answer at once.
const upstreamMaxBody = 64 << 10

// maxResponseHeader bounds a response's header: the Transport's default MaxResponseHeaderBytes.
const maxResponseHeader = 10 << 20

// upstreamConn is one connection to a worker, used by one request at a time.
type upstreamConn struct {
	u     *upstream
	addr  string
	conn  net.Conn
	io    countedConn
	br    *bufio.Reader
	bw    *bufio.Writer
	timer *time.Timer // closes the connection once idle for idleTimeout; nil until first pooled
	wrote chan error  // the result of a write under way while the response is read; nil if none
}

// countedConn counts what a request wrote and read on its connection and bounds the reading
// of a response header.
type countedConn struct {
	conn          net.Conn
	written, read int64
	left          int64 // bytes the header may still take; negative: no bound (the body)
}

func (c *countedConn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxResponseHeader)
	}
	if c.left > 0 && int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.conn.Read(p)
	c.read += int64(n)
	if c.left > 0 {
		c.left -= int64(n)
	}
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.conn.Write(p)
	c.written += int64(n)
	return n, err
}

func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || u.fallback.MaxConnsPerHost > 0 || !asciiHost(req.URL.Host) {
		return u.fallback.RoundTrip(req)
	}
	addr := dialAddress(req.URL)
	c, err := u.get(req.Context(), addr)
	if err != nil {
		return unsent(req, err)
	}
	reused := c.timer != nil
	res, err := c.roundTrip(req)
	if err == nil || !reused || !c.shouldRetry(req) {
		return res, err
	}
	if req.Body != nil {
		again := *req // a RoundTripper leaves its request as it was given (the Transport copies too)
		if again.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
		req = &again
	}
	if c, err = u.dial1(req.Context(), addr); err != nil {
		return unsent(req, err)
	}
	return c.roundTrip(req)
}

// unsent closes the body of a request that could not be sent: a RoundTripper closes the body
// whatever happens (Request.Write does once it has written it).
func unsent(req *http.Request, err error) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return nil, err
}

// asciiHost says whether host needs no IDNA conversion (RFC 5891) before it is dialed; the
// Transport converts the others.
func asciiHost(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// dialAddress is the host:port of an http:// worker URL: without a port (a normalised URL drops
// the default one) it is port 80, as net/http's Transport reads it (canonicalAddr).
func dialAddress(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// shouldRetry is net/http's Transport's rule for a request that failed on a pooled
// connection: again on a new one when nothing of it was written and its body can be sent again,
// or when the worker answered nothing and the request may be replayed (no body or a rewindable
// one, and an idempotent method or an Idempotency-Key).
func (c *upstreamConn) shouldRetry(req *http.Request) bool {
	if req.Context().Err() != nil || (req.Body != nil && req.GetBody == nil) {
		return false
	}
	if c.io.written == 0 {
		return true
	}
	if c.io.read > 0 {
		return false
	}
	switch req.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return req.Header["Idempotency-Key"] != nil || req.Header["X-Idempotency-Key"] != nil
}

// roundTrip sends req on c and reads its response; the connection is closed on any error.
func (c *upstreamConn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { c.conn.Close() })
	c.io.written, c.io.read, c.io.left = 0, 0, maxResponseHeader
	res, wroteAll, err := c.exchange(req)
	if err != nil {
		stop()
		c.u.discard(c)
		if c.wrote != nil { // the body is not read once RoundTrip has returned an error
			req.Body.Close() // a RoundTripper closes the body; a read of it blocked ends
			<-c.wrote
			c.wrote = nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	c.io.left = -1
	if res.StatusCode == http.StatusSwitchingProtocols {
		res.Body = &switchedConn{c, stop}
		return res, nil
	}
	body := &upstreamBody{c: c, ctx: ctx, body: res.Body, stop: stop, keep: wroteAll && !res.Close && !req.Close}
	if res.Body == http.NoBody {
		body.end(io.EOF)
	} else {
		res.Body = body
	}
	return res, nil
}

// exchange writes req and reads its response. A body of up to upstreamMaxBody is written
// before the response is read; a larger one, or one of unknown length, is written by a
// goroutine of its own while the response is read, as the Transport writes every request, so
// that a worker answering before it has read the body (and not reading it) is heard at once.
// wroteAll is false when the write failed: the connection cannot be used again.
func (c *upstreamConn) exchange(req *http.Request) (res *http.Response, wroteAll bool, err error) {
	if req.Body == nil || req.Body == http.NoBody || (req.ContentLength > 0 && req.ContentLength <= upstreamMaxBody) {
		if err := c.write(req); err != nil {
			res, err = c.earlyAnswer(req, err)
			return res, false, err
		}
		res, err = c.readResponse(req)
		return res, true, err
	}
	wrote := make(chan error, 1)
	c.wrote = wrote
	go func() { wrote <- c.write(req) }()
	res, err = c.readResponse(req)
	return res, true, err // the body's end waits for the write (wroteOK)
}

func (c *upstreamConn) write(req *http.Request) error {
	if err := req.Write(c.bw); err != nil {
		return err
	}
	return c.bw.Flush()
}

// earlyAnswerWait bounds the read of an answer after a failed write: net/http's Transport
// waits as long for a write's result before it reuses a connection (maxWriteWaitBeforeConnReuse).
const earlyAnswerWait = 50 * time.Millisecond

// earlyAnswer is the answer a worker sent before its connection failed the write of the
// request, or the write's error when there is none: a worker may answer a POST before reading
// its body (a 401 for a missing key) and close, and the body it left unread resets the
// connection while its answer waits in the gateway's socket.
func (c *upstreamConn) earlyAnswer(req *http.Request, writeErr error) (*http.Response, error) {
	if req.Context().Err() != nil || c.conn.SetReadDeadline(time.Now().Add(earlyAnswerWait)) != nil {
		return nil, writeErr
	}
	res, err := c.readResponse(req)
	if err != nil {
		return nil, writeErr
	}
	c.conn.SetReadDeadline(time.Time{}) // the body is read within the gateway's own timeouts
	return res, nil
}

// wroteOK waits for a write still under way (a large body) and says whether it succeeded; a
// write that has not ended earlyAnswerWait after its answer leaves the connection unusable, as
// the Transport decides (wroteRequest).
func (c *upstreamConn) wroteOK() bool {
	wrote := c.wrote
	if wrote == nil {
		return true
	}
	c.wrote = nil
	select {
	case err := <-wrote:
		return err == nil
	default:
	}
	t := time.NewTimer(earlyAnswerWait)
	defer t.Stop()
	select {
	case err := <-wrote:
		return err == nil
	case <-t.C:
		return false
	}
}

// readResponse reads the final response, passing the 1xx before it to the request's trace
// (the ReverseProxy forwards them to the client) as the Transport does.
func (c *upstreamConn) readResponse(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	for {
		res, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		if res.StatusCode < 100 || res.StatusCode > 199 || res.StatusCode == http.StatusSwitchingProtocols {
			return res, nil
		}
		// A 1xx the trace takes is the taker's to bound, so the header bound starts afresh;
		// otherwise every header read counts against one bound.
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(res.StatusCode, textproto.MIMEHeader(res.Header)); err != nil {
				return nil, err
			}
			c.io.left = maxResponseHeader
		}
	}
}

// upstreamBody is a response's body: read to its end cleanly, it gives the connection back to
// the pool; closed early or failed, it closes the connection. As net/http's bodies, it takes a
// Close while a Read waits (the Close closes the connection, which ends the Read), and after
// its end every Read returns the same error.
type upstreamBody struct {
	c    *upstreamConn
	ctx  context.Context // the try's: a read its cancellation cut fails with its cause
	body io.ReadCloser
	stop func() bool // stops the try's cancellation from closing the connection
	keep bool        // neither side asked to close the connection
	mu   sync.Mutex
	err  error // set at the end: io.EOF, the read's failure, or errBodyClosed
}

var errBodyClosed = errors.New("http: read on closed response body")

func (b *upstreamBody) Read(p []byte) (int, error) {
	if err := b.ended(); err != nil {
		return 0, err
	}
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() != nil {
		err = context.Cause(b.ctx) // as the Transport: the try was cancelled, not the worker's fault
	}
	if err != nil {
		err = b.end(err)
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	b.end(errBodyClosed)
	return nil
}

func (b *upstreamBody) ended() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// end records the body's end once and settles the connection; it returns the recorded end.
func (b *upstreamBody) end(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
		b.done(err == io.EOF)
	}
	return b.err
}

// done gives the connection back after a clean end of the answer with nothing sent after it
// (an unsolicited byte makes the Transport drop a connection too), else closes it.
func (b *upstreamBody) done(clean bool) {
	if b.stop() && clean && b.keep && b.c.br.Buffered() == 0 && b.c.wroteOK() {
		b.c.u.put(b.c)
		return
	}
	b.c.u.discard(b.c)
}

// switchedConn is the worker's side of an upgraded connection, which the ReverseProxy copies
// both ways.
type switchedConn struct {
	c    *upstreamConn
	stop func() bool
}

func (s *switchedConn) Read(p []byte) (int, error)  { return s.c.br.Read(p) }
func (s *switchedConn) Write(p []byte) (int, error) { return s.c.conn.Write(p) }
func (s *switchedConn) Close() error {
	s.stop()
	return s.c.u.discard(s.c)
}

// get takes the most recently pooled connection to addr that the worker has not closed, or
// dials one.
func (u *upstream) get(ctx context.Context, addr string) (*upstreamConn, error) {
	if ctx.Err() != nil { // its cancellation would close the connection it took
		return nil, context.Cause(ctx)
	}
	for {
		u.mu.Lock()
		list := u.idle[addr]
		if len(list) == 0 {
			u.mu.Unlock()
			return u.dial1(ctx, addr)
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		u.idle[addr] = list[:len(list)-1] // kept when empty: a put usually follows (see discard)
		u.mu.Unlock()
		c.timer.Stop()
		if idleAndOpen(c.conn) {
			return c, nil
		}
		u.discard(c)
	}
}

// idleAndOpen says whether a pooled connection is still open with nothing to read: the
// Transport's read loop notices a worker closing an idle connection as it happens; without one,
// a look at the socket (a peek that does not wait) notices it before the connection is used.
func idleAndOpen(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = err == syscall.EAGAIN // else closed (0 bytes), failed, or bytes nobody asked for
		return true
	})
	return err == nil && open
}

// dial1 opens a new connection to addr.
func (u *upstream) dial1(ctx context.Context, addr string) (*upstreamConn, error) {
	conn, err := u.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &upstreamConn{u: u, addr: addr, conn: conn}
	c.io.conn = conn
	c.br = bufio.NewReaderSize(&c.io, 4<<10)
	c.bw = bufio.NewWriterSize(&c.io, 4<<10)
	return c, nil
}

// put pools an idle connection, or closes it when the pool of its worker is full.
func (u *upstream) put(c *upstreamConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	list := u.idle[c.addr]
	if len(list) >= u.maxIdle {
		c.conn.Close()
		return
	}
	if u.idle == nil {
		u.idle = map[string][]*upstreamConn{}
	}
	u.idle[c.addr] = append(list, c)
	if c.timer == nil {
		c.timer = time.AfterFunc(u.idleTimeout, func() { u.expire(c) })
	} else {
		c.timer.Reset(u.idleTimeout)
	}
}

// discard closes a connection that is not given back, and forgets its worker when no idle
// connection to it is left: workers come and go (the worker API), and the pool keeps an entry
// only for a worker with idle connections or one in use, whose end gives it back or comes here
// (get leaves the entry empty, so that the put that usually follows does not allocate again).
func (u *upstream) discard(c *upstreamConn) error {
	err := c.conn.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	if list, ok := u.idle[c.addr]; ok && len(list) == 0 {
		delete(u.idle, c.addr)
	}
	return err
}

// expire closes c if it is still idle.
func (u *upstream) expire(c *upstreamConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	list := u.idle[c.addr]
	for i, idle := range list {
		if idle == c {
			if list = append(list[:i], list[i+1:]...); len(list) > 0 {
				u.idle[c.addr] = list
			} else {
				delete(u.idle, c.addr)
			}
			c.conn.Close()
			return
		}
	}
}

// CloseIdleConnections closes every idle connection.
func (u *upstream) CloseIdleConnections() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for addr, list := range u.idle {
		for _, c := range list {
			c.timer.Stop()
			c.conn.Close()
		}
		delete(u.idle, addr)
	}
	u.fallback.CloseIdleConnections()
}
