package clientconn

import (
	"bytes"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// pollerStates is the state the goroutine dump gives each poller's goroutine ("IO wait",
// "syscall", ...): this test's and any other test's still ending.
func pollerStates() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var states []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if !bytes.Contains(g, []byte("clientconn.(*poller).run")) {
			continue
		}
		head := string(g[:bytes.IndexByte(g, '\n')]) // goroutine 7 [IO wait]:
		state := head[strings.IndexByte(head, '[')+1 : strings.IndexByte(head, ']')]
		states = append(states, strings.SplitN(state, ",", 2)[0]) // without ", 2 minutes"
	}
	return states
}

// The poller waits in the runtime's network poller: a goroutine blocked in epoll_wait itself
// would hold a processor in a system call until the runtime took it back (up to 10 ms; with
// GOMAXPROCS=1 the only one), and every client's leave would start that again. Between waits the
// poller passes through a short system call (epoll_wait with no timeout), so the test looks until
// every poller is in "IO wait"; a blocking wait would show "syscall" until the deadline.
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
	var states []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		states = pollerStates()
		if len(states) > 0 && !slices.ContainsFunc(states, func(s string) bool { return s != "IO wait" }) {
			return
		}
	}
	t.Fatalf("the pollers' goroutines wait in states %q, want every one in \"IO wait\"", states)
}
