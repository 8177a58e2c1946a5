package clientconn

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// The linger's bounds when Options leaves them zero (net/http waits 500 ms too).
const (
	DefaultLingerTimeout = 500 * time.Millisecond
	DefaultLingerBytes   = 256 << 10
)

// Options bound the lingering close of the connections. Zero means the default.
type Options struct {
	LingerTimeout time.Duration // at most this long reading what the client still sends after the close
	LingerBytes   int64         // and at most this many bytes
}

func (o Options) withDefaults() (Options, error) {
	if o.LingerTimeout < 0 {
		return o, fmt.Errorf("clientconn: Options.LingerTimeout must not be negative, got %v", o.LingerTimeout)
	}
	if o.LingerBytes < 0 {
		return o, fmt.Errorf("clientconn: Options.LingerBytes must not be negative, got %d", o.LingerBytes)
	}
	if o.LingerTimeout == 0 {
		o.LingerTimeout = DefaultLingerTimeout
	}
	if o.LingerBytes == 0 {
		o.LingerBytes = DefaultLingerBytes
	}
	return o, nil
}

// Listener accepts the proxy port's connections as *Conn, all watched by one watcher.
type Listener struct {
	ln        *net.TCPListener
	opts      Options
	w         *watcher
	closeOnce sync.Once
}

// Listen wraps ln, which must be a TCP listener (net.Listen("tcp", ...)). It starts the
// watcher, which ends once the listener and every connection it accepted are closed. On error
// ln is left as it was, still the caller's.
func Listen(ln net.Listener, o Options) (*Listener, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("clientconn: Listen needs a TCP listener (net.Listen(\"tcp\", ...)), got %T", ln)
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	w, err := newWatcher()
	if err != nil {
		return nil, err
	}
	return &Listener{ln: tl, opts: o, w: w}, nil
}

// Accept waits for the next connection and registers it with the watcher. A connection that
// cannot be registered is closed and its error returned: it would break the release rule.
func (l *Listener) Accept() (net.Conn, error) {
	tc, err := l.ln.AcceptTCP()
	if err != nil {
		return nil, err
	}
	c, err := l.w.add(tc, l.opts)
	if err != nil {
		tc.Close()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: err}
	}
	return c, nil
}

// Close closes the listening socket. Connections already accepted stay open and watched; the
// watcher ends with the last of them.
func (l *Listener) Close() error {
	err := l.ln.Close()
	l.closeOnce.Do(l.w.listenerClosed)
	return err
}

// CutAll cuts every connection: each watch that is on is called as if the client had left, and
// every one started later at once, and the connection's reads and writes fail from now on. A
// server that must stop past its bound ends the requests it still serves so.
func (l *Listener) CutAll() {
	for _, c := range l.w.all() {
		c.clientLeft()
		c.rawConn.SetDeadline(time.Now())
	}
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }
