package clientconn

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// watcherState is the state the goroutine dump gives the poller's goroutine ("IO wait",
// "syscall", ...), empty while it has none to report.
func watcherState() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if !bytes.Contains(g, []byte("clientconn.(*poller).run")) {
			continue
		}
		head := string(g[:bytes.IndexByte(g, '\n')]) // goroutine 7 [IO wait]:
		state := head[strings.IndexByte(head, '[')+1 : strings.IndexByte(head, ']')]
		return strings.SplitN(state, ",", 2)[0] // without ", 2 minutes"
	}
	return ""
}

// The poller waits in the runtime's network poller: a goroutine blocked in epoll_wait itself
// would hold a processor in a system call until the runtime took it back (up to 10 ms; with
// GOMAXPROCS=1 the only one), and every client's leave would start that again.
func TestThePollerWaitsWithoutHoldingAProcessor(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	left := newCalls()
	c.Watch(left.left)
	client.Close() // one leave, so the wait has been entered again after an event
	select {
	case <-left.first:
	case <-time.After(5 * time.Second):
		t.Fatal("the client's leave was not reported")
	}
	var state string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if state = watcherState(); state != "" && state != "running" && state != "runnable" {
			break
		}
	}
	if state != "IO wait" {
		t.Fatalf("the poller's goroutine waits in state %q, want \"IO wait\"", state)
	}
}
