package clientconn

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// listen starts a Listener on a free loopback port, closed when the test ends.
func listen(t testing.TB, o Options) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(ln, o)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dial opens a client connection to l, closed when the test ends.
func dial(t testing.TB, l *Listener) *net.TCPConn {
	t.Helper()
	client, err := net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// accept takes the next connection of l, closed when the test ends (after its client).
func accept(t testing.TB, l *Listener) *Conn {
	t.Helper()
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := nc.(*Conn)
	t.Cleanup(func() { c.Close() })
	return c
}

// pair is a client connection to l and its server side.
func pair(t testing.TB, l *Listener) (*Conn, *net.TCPConn) {
	t.Helper()
	client := dial(t, l)
	return accept(t, l), client
}

// calls counts the calls of its left and signals the first one.
type calls struct {
	n     atomic.Int32
	first chan struct{}
}

func newCalls() *calls { return &calls{first: make(chan struct{})} }

func (k *calls) left() {
	if k.n.Add(1) == 1 {
		close(k.first)
	}
}

// wait fails the test unless left is called within 5 s.
func (k *calls) wait(t testing.TB) {
	t.Helper()
	select {
	case <-k.first:
	case <-time.After(5 * time.Second):
		t.Fatal("left was not called within 5 s")
	}
}

// within fails the test unless f returns within 5 s.
func within(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return within 5 s", what)
	}
}

func (w *watcher) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.conns)
}

func (c *Conn) clientGone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone
}
