package clientconn

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/internal/loopback"
)

// What fasthttp's Server asserts on the connections it accepts (server.go, keepAliveConn),
// and what the proxy port needs, must pass through the wrapper.
var (
	_ net.Listener = (*Listener)(nil)
	_ net.Conn     = (*Conn)(nil)
	_ interface {
		SetKeepAlive(bool) error
		SetKeepAlivePeriod(time.Duration) error
		io.Closer
	} = (*Conn)(nil)
	_ interface{ CloseWrite() error } = (*Conn)(nil)
)

type notTCP struct{ net.Listener }

func TestListenRefusesBadInput(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		ln   net.Listener
		o    Options
		want string
	}{
		{notTCP{ln}, Options{}, "clientconn: Listen needs a TCP listener"},
		{ln, Options{LingerTimeout: -1}, "Options.LingerTimeout must not be negative"},
		{ln, Options{LingerBytes: -1}, "Options.LingerBytes must not be negative"},
	} {
		if _, err := Listen(tc.ln, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Listen(%T, %+v) = %v, want an error with %q", tc.ln, tc.o, err, tc.want)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	l := listen(t, Options{})
	if l.opts.LingerTimeout != 500*time.Millisecond || l.opts.LingerBytes != 256<<10 {
		t.Fatalf("defaults are %+v, want 500 ms and 256 KiB", l.opts)
	}
}

func TestListenerCloseEndsTheWatcher(t *testing.T) {
	before := runtime.NumGoroutine()
	l := listen(t, Options{})
	for range 3 {
		c, client := pair(t, l)
		client.Close()
		c.Close()
	}
	l.Close()
	within(t, "the watcher", func() { <-l.w.done })
	loopback.WaitFor(t, "the goroutines to go back to their number before Listen", func() bool {
		return runtime.NumGoroutine() <= before
	})
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

// A connection accepted while the listener closes, after the watcher has ended, is refused.
func TestNoConnectionIsAddedOnceTheWatcherEnded(t *testing.T) {
	l := listen(t, Options{})
	other := listen(t, Options{})
	dial(t, other)
	tc, err := other.ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	l.Close()
	if _, err := l.w.add(tc, l.opts); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("add after the watcher ended: %v, want net.ErrClosed", err)
	}
	if n := l.w.size(); n != 0 {
		t.Fatalf("the watcher holds %d connections", n)
	}
}
