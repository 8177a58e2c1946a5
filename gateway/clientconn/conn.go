package clientconn

import (
	"io"
	"sync"
	"time"

	"github.com/bounded-router/bounded-router/gateway/rawio"
)

// rawConn is embedded under an unexported name: its Read, Write, ReadFrom and WriteTo (package
// rawio's) and every other method of *net.TCPConn pass through (deadlines, CloseWrite, the
// SetKeepAlive and SetKeepAlivePeriod that fasthttp's Serve asserts), while the connection
// cannot be closed around Close.
type rawConn = rawio.Conn

// Conn is an accepted client connection: Watch reports its client leaving, and Close lingers.
type Conn struct {
	*rawConn
	w    *watcher
	id   uint64
	opts Options

	mu     sync.Mutex
	gone   bool   // the client has left: FIN, half-close, reset or error seen
	closed bool   // Close has begun: left is never called any more
	gen    uint64 // the number of the last Watch
	left   func() // the watch that is on, nil if none
	leftAt uint64 // the gen of the first watch whose left was called, 0 if none

	closeOnce sync.Once
	closeErr  error
}

// Watch calls left once, from the watcher's goroutine, when the client closes (FIN),
// half-closes or resets its side while the watch is on; if the client had already left, left
// is called at once, before Watch returns. The returned stop ends the watch (idempotent, safe
// concurrently with left) and says whether left was called, or is being called: it does not
// wait for left to return. left runs on the goroutine that serves every connection's events,
// so it must return at once (a context's cancel does). After Close, left is never called.
// One watch at a time: Watch while another is on panics. A FIN counts even when requests sent
// before it are still unread, so a pipelining client that half-closes has them cancelled.
func (c *Conn) Watch(left func()) (stop func() bool) {
	c.mu.Lock()
	if c.left != nil {
		c.mu.Unlock()
		panic("clientconn: Watch while another watch of the connection is on")
	}
	if c.closed {
		c.mu.Unlock()
		return notCalled
	}
	c.gen++
	gen := c.gen
	stop = func() bool { return c.stop(gen) }
	if !c.gone {
		c.left = left
		c.mu.Unlock()
		return stop
	}
	c.markLeft(gen)
	c.mu.Unlock()
	left()
	return stop
}

// notCalled is the stop of a watch started after Close.
func notCalled() bool { return false }

func (c *Conn) stop(gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.left = nil
	}
	// Once the client is gone every later watch before Close is called at once, and none is
	// started after Close, so the watches called are exactly those from leftAt on.
	return c.leftAt != 0 && gen >= c.leftAt
}

// markLeft records that the watch gen is called; c.mu is held.
func (c *Conn) markLeft(gen uint64) {
	if c.leftAt == 0 {
		c.leftAt = gen
	}
}

// clientLeft is the watcher's report: it calls the watch that is on, if any, and remembers.
func (c *Conn) clientLeft() {
	c.mu.Lock()
	c.gone = true
	left := c.left
	if left != nil {
		c.left = nil
		c.markLeft(c.gen)
	}
	c.mu.Unlock()
	if left != nil {
		left()
	}
}

// Close ends any watch without calling it, takes the connection out of the epoll set, and
// closes it the lingering way (see the package doc). The linger runs in the caller, so a
// caller that closes many connections in turn (fasthttp's Shutdown closes its idle ones so)
// waits for each client's FIN, LingerTimeout at most. It is idempotent: a second Close waits
// for the first and returns its error.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Conn) close() error {
	c.mu.Lock()
	c.closed = true
	c.left = nil
	c.mu.Unlock()
	c.w.remove(c)
	c.linger()
	return c.rawConn.Close()
}

// linger sends FIN, then discards what the client still sends until it closes too, or the
// bounds are reached. Its errors are ignored: the connection is closed next in any case. A Read
// waiting meanwhile ends at the deadline set here.
func (c *Conn) linger() {
	if c.rawConn.CloseWrite() != nil {
		return
	}
	if c.rawConn.SetReadDeadline(time.Now().Add(c.opts.LingerTimeout)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, c.rawConn, c.opts.LingerBytes)
}
