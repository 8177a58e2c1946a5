package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/bounded-router/bounded-router/gateway/rawio"
	"github.com/valyala/fasthttp"
)

// upstream is the gateway's transport to its workers over HTTP/1.1: it writes a request (wire.go)
// and reads its answer with fasthttp's response parser on the calling goroutine, over a
// keep-alive connection from a bounded pool per worker; only a body over upstreamMaxBody is
// written by a goroutine while the answer is read. The rules it keeps are net/http's
// Transport's: 1xx answers passed on (any number), a bounded response header, a connection given
// back only after a clean end of its answer, a request retried once on a new connection when a
// pooled one turns out closed before the worker read anything of it (shouldRetry), an answer
// sent before the body was read passed on even when the write failed (earlyAnswer). A cancelled
// try (the client left, the waiting list, a timeout) closes its connection. Contract: Worker
// failures, "Deadlines and connections".
type upstream struct {
	dial        func(ctx context.Context, network, address string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	// slots bounds the connections to each worker (Options.MaxConnsPerHost); nil: no bound.
	slots *connSlots
	// rootCAs verify an https:// worker's certificate; nil: the system's (tests trust their own).
	rootCAs *x509.CertPool

	mu   sync.Mutex
	idle map[string][]*upstreamConn // worker address (target.addr) -> idle connections, most recent last
}

// upstreamMaxBody is the largest request body upstream writes before it reads: a worker may
// answer a larger one before reading it all, and writing first could block until the worker
// closes, where reading while writing returns the answer at once.
const upstreamMaxBody = 64 << 10

// A response header is read into the connection's buffer, which starts at headerBufferSize and
// doubles up to maxResponseHeader for a larger header (most are a few hundred bytes).
const (
	headerBufferSize  = 4 << 10
	maxResponseHeader = 1 << 20
)

var errSwitchedMidBody = errors.New("the worker switched protocols before it had read the request's body")

var errResponseHeaderTooLarge = errors.New("the worker's response header is larger than 1 MiB")

// upstreamConn is one connection to a worker, used by one request at a time.
type upstreamConn struct {
	u     *upstream
	addr  string
	conn  net.Conn
	io    countedConn
	br    *bufio.Reader
	bw    *bufio.Writer
	timer *time.Timer // closes the connection once idle for idleTimeout; nil until first pooled
	wrote chan error  // the result of a write under way while the answer is read; nil if none
	slot  bool        // holds one of slots' places for its worker
}

// countedConn counts what a request wrote and read on its connection (shouldRetry's inputs, and
// the response heads' bound).
type countedConn struct {
	conn          net.Conn
	written, read int64
	// pending is what a reader outgrown by a header had buffered, read again before the
	// connection (readHead).
	pending []byte
}

func (c *countedConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.conn.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.conn.Write(p)
	c.written += int64(n)
	return n, err
}

// roundTrip sends req under ctx and reads its answer's head into res. It returns the answer's
// body, which the caller reads and closes (its end gives the connection back or closes it).
func (u *upstream) roundTrip(try *canceller, req *outgoing, res *fasthttp.Response) (answerBody, error) {
	c, err := u.get(try, req.target, false)
	if err != nil {
		return nil, err
	}
	reused := c.timer != nil
	body, err := c.roundTrip(try, req, res)
	if err == nil || !reused || !c.shouldRetry(try, req) {
		return body, err
	}
	if c, err = u.get(try, req.target, true); err != nil {
		return nil, err
	}
	return c.roundTrip(try, req, res)
}

// answerBody is a worker's answer body as roundTrip hands it over: an *upstreamBody, or the
// worker's side of an upgraded connection.
type answerBody = io.ReadCloser

// shouldRetry is net/http's Transport's rule for a request that failed on a pooled connection:
// again on a new one when nothing of it was written, or when the worker answered nothing and the
// request may be replayed (an idempotent method or an Idempotency-Key).
func (c *upstreamConn) shouldRetry(try *canceller, req *outgoing) bool {
	switch {
	case try.err() != nil:
		return false
	case c.io.written == 0:
		return true
	case c.io.read > 0:
		return false
	}
	return req.replayable()
}

// roundTrip sends req on c and reads its answer; the connection is closed on any error.
func (c *upstreamConn) roundTrip(try *canceller, req *outgoing, res *fasthttp.Response) (answerBody, error) {
	try.onCancel(c)
	c.io.written, c.io.read = 0, 0
	wroteAll, err := c.exchange(try, req, res)
	if err != nil {
		try.stop()
		c.u.discard(c)
		c.endWrite()
		if cause := try.err(); cause != nil {
			return nil, cause
		}
		return nil, err
	}
	if res.StatusCode() == fasthttp.StatusSwitchingProtocols {
		if !c.wroteOK() { // the rest of the body would be mixed with the client's bytes
			try.stop()
			c.u.discard(c)
			return nil, errSwitchedMidBody
		}
		return &switchedConn{c, try}, nil
	}
	// fasthttp gives an answer without a length (-2) the length of one ended by the close, even
	// a 204 or a 304, which has no body and ends with its head.
	framed := res.BodyStream() == nil || res.Header.ContentLength() != -2
	b := &upstreamBody{c: c, try: try, res: res, keep: wroteAll && !res.ConnectionClose() && framed}
	if res.BodyStream() == nil {
		b.err = io.EOF // nobody has the body yet
		b.done(true)
	}
	return b, nil
}

// exchange writes req and reads its answer's head. A body of up to upstreamMaxBody is written
// before the answer is read; a larger one is written by a goroutine of its own while the answer is
// read, so that a worker answering before it has read the body (and not reading it) is heard
// at once. wroteAll is false when the write failed: the connection cannot be used again.
func (c *upstreamConn) exchange(try *canceller, req *outgoing, res *fasthttp.Response) (wroteAll bool, err error) {
	if len(req.body) <= upstreamMaxBody {
		if err := c.write(req); err != nil {
			return false, c.earlyAnswer(try, req, res, err)
		}
		return true, c.readAnswer(req, res)
	}
	wrote := make(chan error, 1)
	c.wrote = wrote
	go func() { wrote <- c.write(req) }()
	return true, c.readAnswer(req, res) // the body's end waits for the write (wroteOK)
}

func (c *upstreamConn) write(req *outgoing) error {
	if err := writeRequest(c.bw, req); err != nil {
		return err
	}
	return c.bw.Flush()
}

// earlyAnswerWait bounds the read of an answer after a failed write: net/http's Transport
// waits as long for a write's result before it reuses a connection (maxWriteWaitBeforeConnReuse).
const earlyAnswerWait = 50 * time.Millisecond

// earlyAnswer reads the answer a worker sent before its connection failed the write of the
// request, or returns the write's error when there is none: a worker may answer a POST before
// reading its body (a 401 for a missing key) and close, and the body it left unread resets the
// connection while its answer waits in the gateway's socket.
func (c *upstreamConn) earlyAnswer(try *canceller, req *outgoing, res *fasthttp.Response, writeErr error) error {
	if try.err() != nil || c.conn.SetReadDeadline(time.Now().Add(earlyAnswerWait)) != nil {
		return writeErr
	}
	if err := c.readAnswer(req, res); err != nil {
		return writeErr
	}
	c.conn.SetReadDeadline(time.Time{}) // the body is read within the gateway's own timeouts
	return nil
}

// wroteOK waits for a write still under way (a large body) and says whether it succeeded; a
// write that has not ended earlyAnswerWait after its answer leaves the connection unusable, as
// the Transport decides (wroteRequest), and is waited for once the connection is closed
// (endWrite).
func (c *upstreamConn) wroteOK() bool {
	if c.wrote == nil {
		return true
	}
	select {
	case err := <-c.wrote:
		c.wrote = nil
		return err == nil
	default:
	}
	t := time.NewTimer(earlyAnswerWait)
	defer t.Stop()
	select {
	case err := <-c.wrote:
		c.wrote = nil
		return err == nil
	case <-t.C:
		return false
	}
}

// endWrite waits for a write still under way on a closed connection (which ends it): the body
// it writes is the client's request's buffer, which the server reuses once the answer is sent.
func (c *upstreamConn) endWrite() {
	if c.wrote != nil {
		<-c.wrote
		c.wrote = nil
	}
}

// readAnswer reads the final answer's head, passing the 1xx before it to req.informational as
// the Transport passes them to its trace, then sets up its body as a stream read from the
// connection (none for a HEAD, a 204 or a 304). As in the Transport, the heads share
// maxResponseHeader, which starts again after a 1xx passed on: without a taker, a worker
// cannot send 1xx without end.
func (c *upstreamConn) readAnswer(req *outgoing, res *fasthttp.Response) error {
	res.Reset()
	keepAsSent(&res.Header)
	from := c.consumed()
	for {
		if err := c.readHead(&res.Header); err != nil {
			return err
		}
		if c.consumed()-from > maxResponseHeader {
			return errResponseHeaderTooLarge
		}
		status := res.Header.StatusCode()
		if status < 100 || status > 199 || status == fasthttp.StatusSwitchingProtocols {
			break
		}
		if req.informational != nil {
			if err := req.informational(&res.Header); err != nil {
				return err
			}
			from = c.consumed()
		}
		res.Header.Reset()
		keepAsSent(&res.Header)
	}
	if req.head || res.StatusCode() == fasthttp.StatusSwitchingProtocols {
		res.SkipBody = true
	}
	if res.SkipBody || res.Header.StatusCode() == fasthttp.StatusNoContent || res.Header.StatusCode() == fasthttp.StatusNotModified {
		return nil
	}
	res.StreamBody = true
	return res.ReadBody(c.br, 0)
}

// keepAsSent makes a response head hold what the worker sent and nothing else: no Content-Type
// it did not send. Names are canonical, as net/http's are.
func keepAsSent(h *fasthttp.ResponseHeader) {
	h.SetNoDefaultContentType(true)
}

// readHead reads one response head, growing the connection's buffer for a header that does not
// fit, up to maxResponseHeader.
func (c *upstreamConn) readHead(h *fasthttp.ResponseHeader) error {
	for {
		err := h.Read(c.br)
		var small *fasthttp.ErrSmallBuffer
		if !errors.As(err, &small) {
			return err
		}
		size := 2 * c.br.Size()
		if size > maxResponseHeader {
			return errResponseHeaderTooLarge
		}
		c.io.pending, _ = c.br.Peek(c.br.Buffered()) // the old reader's buffer, which nobody else uses
		c.br = bufio.NewReaderSize(&c.io, size)
	}
}

// consumed is how many bytes of the connection this try has taken from its reader.
func (c *upstreamConn) consumed() int64 { return c.io.read - int64(c.unread()) }

// unread is how many bytes the connection's reader holds that nobody took.
func (c *upstreamConn) unread() int { return c.br.Buffered() + len(c.io.pending) }

// upstreamBody is an answer's body: read to its end cleanly, it gives the connection back to the
// pool; closed early or failed, it closes the connection. As net/http's bodies, it takes a Close
// while a Read waits (the Close closes the connection, which ends the Read, and the Read settles
// the rest: the stream is released only once nobody reads it), and after its end every Read
// returns the same error.
type upstreamBody struct {
	c       *upstreamConn
	try     *canceller // a read its cancel cut fails with its cause
	res     *fasthttp.Response
	keep    bool // neither side asked to close the connection, and the body is framed
	mu      sync.Mutex
	reading bool  // a Read is under way
	err     error // set at the end: io.EOF, the read's failure, or errBodyClosed
}

var errBodyClosed = errors.New("http: read on closed response body")

func (b *upstreamBody) Read(p []byte) (int, error) {
	if err := b.beginRead(); err != nil {
		return 0, err
	}
	n, err := b.res.BodyStream().Read(p)
	if err != nil && err != io.EOF {
		if cause := b.try.err(); cause != nil {
			err = cause // the try was cancelled, not the worker's fault
		}
	}
	return n, b.endRead(err)
}

// beginRead marks a Read under way, or returns the body's end.
func (b *upstreamBody) beginRead() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = b.err == nil
	return b.err
}

// endRead ends a Read that returned err: a failure or the end of the answer ends the body, and a
// Close that came while it waited is settled now that the stream is not in use.
func (b *upstreamBody) endRead(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	switch {
	case b.err != nil: // closed during the read
		b.done(false)
	case err != nil:
		b.err = err
		b.done(err == io.EOF)
	}
	return b.err
}

func (b *upstreamBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil
	}
	b.err = errBodyClosed
	if b.reading {
		b.c.conn.Close() // ends the read, whose end settles the rest
	} else {
		b.done(false)
	}
	return nil
}

// done gives the connection back after a clean end of the answer with nothing sent after it
// (an unsolicited byte makes the Transport drop a connection too), else closes it.
func (b *upstreamBody) done(clean bool) {
	stopped := b.try.stop()
	if !clean {
		b.c.conn.Close() // before the stream is closed: closing it would drain the rest
	}
	b.res.CloseBodyStream()
	if stopped && clean && b.keep && b.c.unread() == 0 && b.c.wroteOK() {
		b.c.u.put(b.c)
		return
	}
	b.c.u.discard(b.c)
	b.c.endWrite()
}

// switchedConn is the worker's side of an upgraded connection, copied both ways.
type switchedConn struct {
	c   *upstreamConn
	try *canceller
}

func (s *switchedConn) Read(p []byte) (int, error)  { return s.c.br.Read(p) }
func (s *switchedConn) Write(p []byte) (int, error) { return s.c.conn.Write(p) }
func (s *switchedConn) Close() error {
	s.try.stop()
	return s.c.u.discard(s.c)
}

// get returns a connection to t: the most recently pooled one the worker has not closed (unless
// fresh, for a request sent again on a new connection), or a new one within its worker's bound of
// connections. At the bound it waits for a place or for a connection given back to the pool, as
// the Transport under MaxConnsPerHost; a fresh one closes an idle connection for its place.
func (u *upstream) get(try *canceller, t *target, fresh bool) (*upstreamConn, error) {
	if cause := try.err(); cause != nil { // its cancel would close the connection it took
		return nil, cause
	}
	for {
		if !fresh {
			if c := u.takeIdle(t.addr); c != nil {
				return c, nil
			}
		}
		if u.slots == nil {
			return u.dial1(try, t, false)
		}
		free, changed := u.slots.take(t.addr)
		if free {
			return u.dial1(try, t, true)
		}
		if c := u.takeIdle(t.addr); c != nil { // given back before the watch began
			if !fresh {
				return c, nil
			}
			u.discard(c)
			continue
		}
		if err := waitFor(try, changed); err != nil {
			return nil, err
		}
	}
}

// takeIdle takes the most recently pooled connection to addr that the worker has not closed;
// nil if there is none.
func (u *upstream) takeIdle(addr string) *upstreamConn {
	for {
		u.mu.Lock()
		list := u.idle[addr]
		if len(list) == 0 {
			u.mu.Unlock()
			return nil
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		u.idle[addr] = list[:len(list)-1] // kept when empty: a put usually follows (see discard)
		u.mu.Unlock()
		c.timer.Stop()
		if idleAndOpen(c.conn) {
			return c
		}
		u.discard(c)
	}
}

// idleAndOpen says whether a pooled connection is still open with nothing to read: a look at
// the socket (rawio.Idle) notices a worker that closed it while it was idle, before it is used.
func idleAndOpen(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	return err == nil && rawio.Idle(raw)
}

// dial1 opens a new connection to t, which holds one of its worker's places when slot.
func (u *upstream) dial1(try *canceller, t *target, slot bool) (*upstreamConn, error) {
	ctx, stop := contextOf(try)
	defer stop()
	conn, err := u.dial(ctx, "tcp", t.addr)
	if err == nil {
		conn = rawio.Wrap(conn)
	}
	if err == nil && t.tls {
		conn, err = handshake(ctx, conn, t.serverName, u.rootCAs)
	}
	if err != nil {
		if slot {
			u.slots.give(t.addr)
		}
		return nil, err
	}
	c := &upstreamConn{u: u, addr: t.addr, conn: conn, slot: slot}
	c.io.conn = conn
	c.br = bufio.NewReaderSize(&c.io, headerBufferSize)
	c.bw = bufio.NewWriterSize(&c.io, 4<<10)
	return c, nil
}

// handshake starts TLS on a connection to an https:// worker, verified against its name.
func handshake(ctx context.Context, conn net.Conn, serverName string, roots *x509.CertPool) (net.Conn, error) {
	tc := tls.Client(conn, &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// put pools an idle connection, or closes it when the pool of its worker is full.
func (u *upstream) put(c *upstreamConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	list := u.idle[c.addr]
	if len(list) >= u.maxIdle {
		u.closeConn(c)
		return
	}
	if u.idle == nil {
		u.idle = map[string][]*upstreamConn{}
	}
	u.idle[c.addr] = append(list, c)
	if u.slots != nil {
		u.slots.pooled()
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(u.idleTimeout, func() { u.expire(c) })
	} else {
		c.timer.Reset(u.idleTimeout)
	}
}

// closeConn closes a connection and gives back its place among its worker's connections.
func (u *upstream) closeConn(c *upstreamConn) error {
	err := c.conn.Close()
	if c.slot {
		c.slot = false
		u.slots.give(c.addr)
	}
	return err
}

// discard closes a connection that is not given back, and forgets its worker when no idle
// connection to it is left: workers come and go (the worker API), and the pool keeps an entry
// only for a worker with idle connections or one in use, whose end gives it back or comes here
// (get leaves the entry empty, so that the put that usually follows does not allocate again).
func (u *upstream) discard(c *upstreamConn) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	err := u.closeConn(c)
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
			u.closeConn(c)
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
			u.closeConn(c)
		}
		delete(u.idle, addr)
	}
}

// connSlots bounds the connections open to each worker (max_conns_per_host).
type connSlots struct {
	max  int
	mu   sync.Mutex
	used map[string]int // worker address -> connections open; no entry at 0
	// changed is closed when a place frees up or a connection is given back to the pool; nil
	// while nobody waits.
	changed chan struct{}
}

// take takes a place for a new connection to addr, or, with every place taken, returns a channel
// closed at the next change: a place freed, or a connection pooled that the caller may take.
func (s *connSlots) take(addr string) (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[addr] < s.max {
		if s.used == nil {
			s.used = map[string]int{}
		}
		s.used[addr]++
		return true, nil
	}
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return false, s.changed
}

// give frees a place.
func (s *connSlots) give(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[addr]--; s.used[addr] <= 0 {
		delete(s.used, addr)
	}
	s.wake()
}

// pooled says that a connection was given back to the pool.
func (s *connSlots) pooled() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake()
}

func (s *connSlots) wake() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// cancelled is a try's cancel: its connection is closed, which ends a write or read under way.
func (c *upstreamConn) cancelled(error) { c.conn.Close() }

// waitFor waits until changed is closed, or try is cancelled (its cause).
func waitFor(try *canceller, changed <-chan struct{}) error {
	ctx, stop := contextOf(try)
	defer stop()
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
