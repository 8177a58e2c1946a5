//go:build linux

package clientconn

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/internal/loopback"
)

// The ways a client leaves (docs/contract.md, section "Release"), each seen while watched.
var leaving = []struct {
	name  string
	leave func(*net.TCPConn) error
}{
	{"close", (*net.TCPConn).Close},
	{"reset", func(c *net.TCPConn) error {
		if err := c.SetLinger(0); err != nil {
			return err
		}
		return c.Close()
	}},
	{"half-close", (*net.TCPConn).CloseWrite},
	{"close with its next request unread", func(c *net.TCPConn) error {
		if _, err := c.Write([]byte("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return err
		}
		return c.Close()
	}},
}

func TestLeftIsCalledWhenTheClientLeaves(t *testing.T) {
	for _, tc := range leaving {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, Options{})
			c, client := pair(t, l)
			k := newCalls()
			stop := c.Watch(k.left)
			if err := tc.leave(client); err != nil {
				t.Fatal(err)
			}
			k.wait(t)
			if !stop() || !stop() {
				t.Fatal("stop says left was not called")
			}
			if n := k.n.Load(); n != 1 {
				t.Fatalf("left called %d times, want 1", n)
			}
		})
	}
}

func TestLeftIsNotCalledAfterStop(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	first := newCalls()
	stopFirst := c.Watch(first.left)
	if stopFirst() {
		t.Fatal("stop says left was called before the client left")
	}
	client.Close()
	// The second watch is called once the watcher has handled the client's FIN: by then the
	// first would have been called too, had stop not ended it.
	second := newCalls()
	stopSecond := c.Watch(second.left)
	second.wait(t)
	if n := first.n.Load(); n != 0 {
		t.Fatalf("a stopped watch was called %d times", n)
	}
	if stopFirst() {
		t.Fatal("a stopped watch's stop changed its answer")
	}
	if !stopSecond() {
		t.Fatal("stop says the second watch was not called")
	}
}

func TestWatchAfterTheClientLeftCallsAtOnce(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	client.Close()
	loopback.WaitFor(t, "the watcher to see the client leave", c.clientGone)
	k := newCalls()
	stop := c.Watch(k.left)
	if n := k.n.Load(); n != 1 {
		t.Fatalf("left called %d times before Watch returned, want 1", n)
	}
	if !stop() {
		t.Fatal("stop says left was not called")
	}
}

// A client that left before Accept is seen too: the registration reports the state it finds.
func TestAClientThatLeftBeforeAcceptIsSeen(t *testing.T) {
	l := listen(t, Options{})
	client := dial(t, l)
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	client.Close()
	c := accept(t, l)
	k := newCalls()
	stop := c.Watch(k.left)
	k.wait(t)
	if !stop() {
		t.Fatal("stop says left was not called")
	}
}

func TestAStaleStopDoesNotEndTheNextWatch(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	stopFirst := c.Watch(func() { t.Error("the first watch was called after its stop") })
	stopFirst()
	k := newCalls()
	stopSecond := c.Watch(k.left)
	if stopFirst() {
		t.Fatal("the first watch's stop says it was called")
	}
	client.Close()
	k.wait(t)
	if !stopSecond() || stopFirst() {
		t.Fatal("stop answers mixed up the two watches")
	}
}

func TestWatchWhileAnotherIsOnPanics(t *testing.T) {
	l := listen(t, Options{})
	c, _ := pair(t, l)
	stop := c.Watch(func() {})
	defer stop()
	defer func() {
		if recover() == nil {
			t.Fatal("a second Watch did not panic")
		}
	}()
	c.Watch(func() {})
}

func TestLeftIsNeverCalledAfterClose(t *testing.T) {
	l := listen(t, Options{LingerTimeout: 1}) // the client stays open: do not wait for it
	c, client := pair(t, l)
	stop := c.Watch(func() { t.Error("left called after Close") })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	client.Close()
	if stop() {
		t.Fatal("stop says left was called")
	}
	if n := l.w.size(); n != 0 {
		t.Fatalf("the watcher still holds %d connections", n)
	}
	stopAfter := c.Watch(func() { t.Error("a Watch after Close was called") })
	if stopAfter() {
		t.Fatal("a Watch after Close says it was called")
	}
}

// fd is the descriptor number of c.
func fd(t *testing.T, c *Conn) int {
	t.Helper()
	var n int
	if err := c.Raw().Control(func(f uintptr) { n = int(f) }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAClosedConnectionIsNeverReachedAgain(t *testing.T) {
	l := listen(t, Options{})
	var conns []*Conn
	var clients []*net.TCPConn
	for range 40 {
		c, client := pair(t, l)
		conns, clients = append(conns, c), append(clients, client)
	}
	if n := l.w.size(); n != 40 {
		t.Fatalf("the watcher holds %d connections, want 40", n)
	}
	for i := range 20 {
		clients[i].Close()
		conns[i].Close()
	}
	if n := l.w.size(); n != 20 {
		t.Fatalf("after 20 closes the watcher holds %d connections, want 20", n)
	}

	for i := 20; i < 40; i++ {
		clients[i].Close()
		conns[i].Close()
	}
	if n := l.w.size(); n != 0 {
		t.Fatalf("after every close the watcher holds %d connections, want 0", n)
	}
}

// holdFdsBelow takes every free fd number below n, so that the next one the kernel gives is n
// once it is free; it returns them, to close.
func holdFdsBelow(t *testing.T, n int) []int {
	t.Helper()
	var held []int
	for range n + 1 {
		f, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f > n {
			syscall.Close(f)
			return held
		}
		held = append(held, f)
	}
	t.Fatalf("fd %d is still taken", n)
	return nil
}

func TestALateEventNeverReachesTheConnectionThatTookItsFd(t *testing.T) {
	l := listen(t, Options{})
	old, oldClient := pair(t, l)
	oldClient.Close()
	loopback.WaitFor(t, "the watcher to see the old client leave", old.clientGone)
	newClient := dial(t, l)
	oldFd, oldID := fd(t, old), old.id
	held := holdFdsBelow(t, oldFd)
	defer func() {
		for _, f := range held {
			syscall.Close(f)
		}
	}()
	old.Close()
	reused := accept(t, l)
	if got := fd(t, reused); got != oldFd {
		t.Fatalf("the new connection has fd %d, not the old one's %d: the test cannot check reuse", got, oldFd)
	}
	k := newCalls()
	stop := reused.Watch(k.left)
	l.w.left(oldID) // an event for the old id, arriving late
	if stop() {
		t.Fatal("the old connection's event reached the one that took its fd")
	}
	stop = reused.Watch(k.left) // the new connection is watched under its own id
	newClient.Close()
	k.wait(t)
	stop()
}

// Many watches and stops race with the clients leaving and the server's closes; -race checks
// the locking, and afterwards every watch stop reported as called was called exactly once.
func TestConcurrentWatchStopAndClose(t *testing.T) {
	l := listen(t, Options{})
	const conns, rounds = 16, 200
	var wg sync.WaitGroup
	var reported, calledTotal atomic.Int64
	for i := range conns {
		c, client := pair(t, l)
		wg.Add(3)
		go func() {
			defer wg.Done()
			for range rounds {
				var called atomic.Int32
				stop := c.Watch(func() {
					if called.Add(1) > 1 {
						t.Error("left called twice")
					}
					calledTotal.Add(1)
				})
				if stop() {
					reported.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				client.SetLinger(0)
			}
			client.Close()
		}()
		go func() {
			defer wg.Done()
			if i%4 == 0 {
				c.Close()
			}
		}()
	}
	wg.Wait()
	for _, c := range allConns(l) {
		c.Close()
	}
	l.Close()
	within(t, "the watcher", func() { <-l.w.done }) // every left the watcher calls has returned
	if r, c := reported.Load(), calledTotal.Load(); r != c {
		t.Fatalf("stop reported %d calls, left was called %d times", r, c)
	}
}

func allConns(l *Listener) []*Conn {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	var cs []*Conn
	for _, c := range l.w.conns {
		cs = append(cs, c)
	}
	return cs
}

func TestTheWatcherOutlivesTheListenerForItsConnections(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	l.Close()
	k := newCalls()
	stop := c.Watch(k.left)
	client.Close()
	k.wait(t)
	stop()
	select {
	case <-l.w.done:
		t.Fatal("the watcher ended while a connection was open")
	default:
	}
	c.Close()
	within(t, "the watcher", func() { <-l.w.done })
}

// eventID must give back the id epollEvent stored, high half included.
func TestEventIDRoundTrip(t *testing.T) {
	for _, id := range []uint64{1, 1<<32 - 1, 1 << 32, 1<<63 + 12345, 1<<64 - 1} {
		ev := epollEvent(0, id)
		if got := eventID(&ev); got != id {
			t.Fatalf("eventID = %#x, want %#x", got, id)
		}
	}
}

// Edge-triggered: a client that left is reported once, not by every later wait (a
// level-triggered set would report it again with the next event, and spin meanwhile).
func TestALeaveIsReportedOnce(t *testing.T) {
	l := listen(t, Options{})
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan uint64, 16)
	go p.run(func(id uint64) { reports <- id })
	defer p.wake()
	first, firstClient := pair(t, l)
	second, secondClient := pair(t, l)
	if err := p.add(first.Raw(), 1); err != nil {
		t.Fatal(err)
	}
	if err := p.add(second.Raw(), 2); err != nil {
		t.Fatal(err)
	}
	firstClient.Close()
	expectReport(t, reports, 1)
	secondClient.Close()
	expectReport(t, reports, 2)
}

func expectReport(t *testing.T, reports <-chan uint64, want uint64) {
	t.Helper()
	select {
	case id := <-reports:
		if id != want {
			t.Fatalf("the poller reported id %d, want %d", id, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("id %d was not reported within 5 s", want)
	}
}

// Regression: once the client had left, a Watch after Close said it was called.
func TestAWatchAfterCloseIsNotCalledEvenIfTheClientLeft(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	client.Close()
	loopback.WaitFor(t, "the watcher to see the client leave", c.clientGone)
	c.Close()
	stop := c.Watch(func() { t.Error("a Watch after Close was called") })
	if stop() {
		t.Fatal("a Watch after Close says it was called")
	}
}
