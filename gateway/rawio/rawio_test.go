//go:build linux

package rawio

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// pair returns both ends of a loopback TCP connection: the dialled end as a Conn, and the
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
	peer, ok := (<-accepted).(*net.TCPConn)
	if !ok {
		t.Fatal("the listener accepted no connection")
	}
	w, ok := Wrap(c).(*Conn)
	if !ok {
		t.Fatalf("Wrap of a TCP connection gave %T", Wrap(c))
	}
	t.Cleanup(func() { w.Close(); peer.Close() })
	return w, peer
}

// skipInstrumented skips a test of the raw calls in a build that uses net's instead.
func skipInstrumented(t *testing.T) {
	if instrumented {
		t.Skip("under -race, -msan or -asan Read and Write are net's own; make test-go runs this package without the race detector too")
	}
}

func TestWrapLeavesOtherConnections(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap of a pipe gave %T, want the pipe itself", got)
	}
}

// No copy reaches *net.TCPConn's own ReadFrom or WriteTo, which use net's system calls: the
// methods that move bytes are all this package's.
func TestConnMovesBytesOnlyThroughThisPackage(t *testing.T) {
	typ := reflect.TypeOf(&Conn{})
	for _, name := range []string{"Read", "Write", "ReadFrom", "WriteTo"} {
		m, ok := typ.MethodByName(name)
		if !ok {
			t.Fatalf("Conn has no %s", name)
		}
		// A method promoted from *net.TCPConn has the same name, in a wrapper the compiler
		// wrote: the file tells them apart.
		fn := runtime.FuncForPC(m.Func.Pointer())
		if file, _ := fn.FileLine(fn.Entry()); !strings.HasSuffix(file, "/gateway/rawio/conn.go") {
			t.Errorf("Conn.%s is %s, from %s, not this package's", name, fn.Name(), file)
		}
	}
}

// A write larger than the socket's buffers ends in pieces, each after the poller's wait for
// room (the peer starts reading only once the buffers are full), and arrives whole and in order;
// so does the same through ReadFrom, and back through WriteTo.
func TestLargeWritesArriveWhole(t *testing.T) {
	skipInstrumented(t)
	for _, how := range []string{"Write", "ReadFrom", "WriteTo"} {
		t.Run(how, func(t *testing.T) {
			c, peer := pair(t)
			c.SetWriteBuffer(16 << 10)
			peer.SetReadBuffer(16 << 10)
			peer.SetWriteBuffer(16 << 10)
			c.SetReadBuffer(16 << 10)
			c.SetDeadline(time.Now().Add(10 * time.Second)) // a wrong count of what was written fails, not hangs
			peer.SetDeadline(time.Now().Add(10 * time.Second))
			data := make([]byte, 4<<20)
			rand.Read(data)
			if how == "WriteTo" {
				go func() { peer.Write(data); peer.CloseWrite() }()
				var got bytes.Buffer
				time.Sleep(20 * time.Millisecond) // the peer's write fills the buffers first
				if n, err := c.WriteTo(&got); n != int64(len(data)) || err != nil || !bytes.Equal(got.Bytes(), data) {
					t.Fatalf("WriteTo = %d, %v; the bytes equal: %v", n, err, bytes.Equal(got.Bytes(), data))
				}
				return
			}
			got := make(chan []byte, 1)
			go func() {
				time.Sleep(20 * time.Millisecond) // the write fills the buffers first
				b, _ := io.ReadAll(io.LimitReader(peer, int64(len(data))))
				got <- b
			}()
			var n int64
			var err error
			if how == "Write" {
				var m int
				m, err = c.Write(data)
				n = int64(m)
			} else {
				n, err = c.ReadFrom(bytes.NewReader(data))
			}
			if n != int64(len(data)) || err != nil {
				t.Fatalf("%s = %d, %v; want %d, nil", how, n, err, len(data))
			}
			if !bytes.Equal(<-got, data) {
				t.Fatal("the bytes read differ from those written")
			}
		})
	}
}

// A read waits in the poller for the peer's bytes, returns what arrived, then io.EOF after
// the peer's close.
func TestReadWaitsThenEndsAtClose(t *testing.T) {
	skipInstrumented(t)
	c, peer := pair(t)
	go func() {
		time.Sleep(20 * time.Millisecond) // the read is waiting by then
		peer.Write([]byte("hello"))
	}()
	b := make([]byte, 64)
	if n, err := c.Read(b); string(b[:n]) != "hello" || err != nil {
		t.Fatalf("Read gave %q, %v", b[:n], err)
	}
	peer.Close()
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer's close = %d, %v; want 0, io.EOF", n, err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read of nothing = %d, %v; want 0, nil", n, err)
	}
}

// Every result is the one *net.TCPConn gives in the same state: the expected value comes from
// net itself, on a second connection treated alike.
func TestResultsAreNetConns(t *testing.T) {
	skipInstrumented(t)
	cases := []struct {
		name string
		make func(t *testing.T, c net.Conn, peer *net.TCPConn)
		op   func(c net.Conn) (int, error)
	}{
		{"read past its deadline", func(t *testing.T, c net.Conn, _ *net.TCPConn) { c.SetReadDeadline(time.Now().Add(-time.Second)) }, read},
		{"read whose deadline passes while it waits", func(t *testing.T, c net.Conn, _ *net.TCPConn) {
			c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		}, read},
		{"read after close", closeIt, read},
		{"read of nothing after close", closeIt, func(c net.Conn) (int, error) { return c.Read(nil) }},
		{"read closed while it waits", closeSoon, read},
		{"write after close", closeIt, write},
		{"write of nothing after close", closeIt, func(c net.Conn) (int, error) { return c.Write(nil) }},
		{"write of nothing past its deadline", func(t *testing.T, c net.Conn, _ *net.TCPConn) { c.SetWriteDeadline(time.Now().Add(-time.Second)) },
			func(c net.Conn) (int, error) { return c.Write(nil) }},
		{"read after the peer's reset", reset, read},
		{"write past its deadline while the peer reads nothing", func(t *testing.T, c net.Conn, _ *net.TCPConn) {
			c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		}, writeMuch},
		{"write closed while it waits", closeSoon, writeMuch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ours, ourPeer := pair(t)
			tc.make(t, ours, ourPeer)
			gotN, got := tc.op(ours)
			theirs, theirPeer := pair(t)
			tc.make(t, theirs.TCPConn, theirPeer)
			wantN, want := tc.op(theirs.TCPConn)
			if (gotN == 0) != (wantN == 0) || (gotN == len(much)) != (wantN == len(much)) {
				t.Fatalf("wrote %d bytes, net %d", gotN, wantN)
			}
			compareErrors(t, got, want)
		})
	}
}

var much = make([]byte, 64<<20) // more than the socket's buffers hold

func read(c net.Conn) (int, error)      { return c.Read(make([]byte, 16)) }
func write(c net.Conn) (int, error)     { return c.Write([]byte("x")) }
func writeMuch(c net.Conn) (int, error) { return c.Write(much) }

func closeIt(_ *testing.T, c net.Conn, _ *net.TCPConn) { c.Close() }

// closeSoon closes c once the operation that follows is waiting in the poller.
func closeSoon(_ *testing.T, c net.Conn, _ *net.TCPConn) {
	time.AfterFunc(30*time.Millisecond, func() { c.Close() })
}

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
	if (got == nil) != (want == nil) {
		t.Fatalf("got %v, net's %v", got, want)
	}
	if want == nil {
		return
	}
	var gotOp, wantOp *net.OpError
	if !errors.As(got, &gotOp) || !errors.As(want, &wantOp) {
		t.Fatalf("got %T %v, net's %T %v: both should be *net.OpError", got, got, want, want)
	}
	if gotOp.Op != wantOp.Op || gotOp.Net != wantOp.Net || gotOp.Source == nil || gotOp.Addr == nil {
		t.Fatalf("got %q, net's %q", got, want)
	}
	if gotOp.Timeout() != wantOp.Timeout() {
		t.Fatalf("Timeout() = %v, net's %v", gotOp.Timeout(), wantOp.Timeout())
	}
	for _, target := range []error{os.ErrDeadlineExceeded, net.ErrClosed, syscall.ECONNRESET, syscall.EPIPE, io.ErrUnexpectedEOF} {
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

// waitReadable waits, 5 s at most, until the connection has something to read (bytes, an end
// or an error), by ppoll(2), which takes nothing from the socket.
func waitReadable(t *testing.T, c syscall.Conn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int32
	rc.Control(func(f uintptr) { fd = int32(f) })
	pfd := struct {
		fd             int32
		events, revent int16
	}{fd: fd, events: 0x1} // POLLIN
	wait := syscall.NsecToTimespec(int64(10 * time.Millisecond))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, _, _ := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&wait)), 0, 0, 0)
		if n > 0 {
			return
		}
	}
	t.Fatal("nothing arrived within 5 s")
}
