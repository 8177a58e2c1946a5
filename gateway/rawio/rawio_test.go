package rawio

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection: the dialled end wrapped, and the
// accepted end as net gives it.
func pair(t *testing.T) (*Conn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := (<-accepted).(*net.TCPConn)
	w, ok := Wrap(c).(*Conn)
	if !ok {
		t.Fatalf("Wrap of a TCP connection gave %T", Wrap(c))
	}
	t.Cleanup(func() { w.Close(); peer.Close() })
	return w, peer
}

func TestWrapLeavesOtherConnections(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap of a pipe gave %T, want the pipe itself", got)
	}
}

// A write larger than the socket's buffers ends in pieces, each after the poller's wait for
// room, and arrives whole and in order.
func TestLargeWriteArrivesWhole(t *testing.T) {
	c, peer := pair(t)
	data := make([]byte, 8<<20)
	rand.Read(data)
	c.SetWriteDeadline(time.Now().Add(10 * time.Second)) // a wrong count of what was written fails, not hangs
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(data))))
		got <- b
	}()
	n, err := c.Write(data)
	if n != len(data) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(data))
	}
	if !bytes.Equal(<-got, data) {
		t.Fatal("the bytes read differ from those written")
	}
}

// A read waits for the peer's bytes, returns what arrived, then io.EOF after the peer's close.
func TestReadWaitsThenEndsAtClose(t *testing.T) {
	c, peer := pair(t)
	result := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		n, err := c.Read(b)
		result <- string(b[:n]) + "|" + errText(err)
	}()
	peer.Write([]byte("hello"))
	if got := <-result; got != "hello|<nil>" {
		t.Fatalf("Read gave %q", got)
	}
	peer.Close()
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer's close = %d, %v; want 0, io.EOF", n, err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read of nothing = %d, %v; want 0, nil", n, err)
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Every error is the one *net.TCPConn gives in the same state: the expected value comes from
// net itself, on a second connection treated alike.
func TestErrorsAreNetConns(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector Read and Write are net's own; make test-go runs this package without it too")
	}
	cases := []struct {
		name string
		make func(t *testing.T, c net.Conn, peer *net.TCPConn)
		op   func(c net.Conn) (int, error)
	}{
		{"read past its deadline", func(t *testing.T, c net.Conn, _ *net.TCPConn) { c.SetReadDeadline(time.Now().Add(-time.Second)) }, read},
		{"read after close", func(t *testing.T, c net.Conn, _ *net.TCPConn) { c.Close() }, read},
		{"write after close", func(t *testing.T, c net.Conn, _ *net.TCPConn) { c.Close() }, write},
		{"read after the peer's reset", func(t *testing.T, c net.Conn, peer *net.TCPConn) { reset(t, c, peer) }, read},
		{"write past its deadline while the peer reads nothing", func(t *testing.T, c net.Conn, _ *net.TCPConn) {
			c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		}, writeMuch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ours, ourPeer := pair(t)
			tc.make(t, ours, ourPeer)
			_, got := tc.op(ours)
			theirs, theirPeer := pair(t)
			tc.make(t, theirs.TCPConn, theirPeer)
			_, want := tc.op(theirs.TCPConn)
			compareErrors(t, got, want)
		})
	}
}

func read(c net.Conn) (int, error)  { return c.Read(make([]byte, 16)) }
func write(c net.Conn) (int, error) { return c.Write([]byte("x")) }

// writeMuch writes more than the socket's buffers hold.
func writeMuch(c net.Conn) (int, error) { return c.Write(make([]byte, 64<<20)) }

// reset makes the peer close with a reset (SO_LINGER 0), and waits until c has seen it.
func reset(t *testing.T, c net.Conn, peer *net.TCPConn) {
	t.Helper()
	if err := peer.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	waitReadable(t, c.(syscall.Conn)) // not by a peek, which would take the reset's error
}

func compareErrors(t *testing.T, got, want error) {
	t.Helper()
	if want == nil || got == nil {
		t.Fatalf("got %v, net's %v: both should fail", got, want)
	}
	var gotOp, wantOp *net.OpError
	if !errors.As(got, &gotOp) || !errors.As(want, &wantOp) {
		t.Fatalf("got %T %v, net's %T %v: both should be *net.OpError", got, got, want, want)
	}
	if gotOp.Op != wantOp.Op || gotOp.Net != wantOp.Net || gotOp.Source.String() == "" || gotOp.Addr.String() == "" {
		t.Fatalf("got %q, net's %q", got, want)
	}
	if gotOp.Timeout() != wantOp.Timeout() {
		t.Fatalf("Timeout() = %v, net's %v", gotOp.Timeout(), wantOp.Timeout())
	}
	for _, target := range []error{os.ErrDeadlineExceeded, net.ErrClosed, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(got, target) != errors.Is(want, target) {
			t.Fatalf("errors.Is(%v, %v) = %v, net's %v (%v)", got, target, errors.Is(got, target), errors.Is(want, target), want)
		}
	}
	var gotSys, wantSys *os.SyscallError
	if errors.As(got, &gotSys) != errors.As(want, &wantSys) || (gotSys != nil && gotSys.Syscall != wantSys.Syscall) {
		t.Fatalf("got %v, net's %v: the system call's error differs", got, want)
	}
}

// Idle tells an open, quiet connection from one with bytes waiting (which the peek leaves to
// be read) and from one the peer closed.
func TestIdle(t *testing.T) {
	c, peer := pair(t)
	if !Idle(c.rc) {
		t.Fatal("an open connection with nothing sent is not idle")
	}
	peer.Write([]byte("z"))
	waitReadable(t, c)
	if Idle(c.rc) {
		t.Fatal("a connection with a byte waiting is idle")
	}
	b := make([]byte, 1)
	if n, err := c.Read(b); n != 1 || err != nil || b[0] != 'z' {
		t.Fatalf("the byte the peek saw was not left to read: %d, %v, %q", n, err, b)
	}
	peer.Close()
	waitReadable(t, c)
	if Idle(c.rc) {
		t.Fatal("a connection the peer closed is idle")
	}
}

// waitReadable waits, 5 s at most, until the connection has something to read (bytes or an end).
func waitReadable(t *testing.T, c syscall.Conn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fds := []int{}
	rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) })
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var set syscall.FdSet
		set.Bits[fds[0]/64] |= 1 << (uint(fds[0]) % 64)
		tv := syscall.Timeval{Usec: 10000}
		if n, _ := syscall.Select(fds[0]+1, &set, nil, nil, &tv); n > 0 {
			return
		}
	}
	t.Fatal("nothing arrived within 5 s")
}
