// Package loopback holds the helpers of the tests that talk ZeroMQ over 127.0.0.1 (kvevents,
// peerroutes): a free endpoint and a bounded wait for a condition.
package loopback

import (
	"net"
	"testing"
	"time"
)

// FreeEndpoint is a loopback tcp:// endpoint nothing listens on yet.
func FreeEndpoint(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

// WaitFor polls cond every 10 ms, at most 1000 times, and fails the test if it never holds.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
