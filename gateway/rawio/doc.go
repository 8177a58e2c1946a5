// Package rawio reads and writes the gateway's TCP connections with system calls that Go's
// scheduler does not see.
//
// The invariant, stated once: every call here is made on a nonblocking socket (Go opens every
// socket so) and cannot block: it returns with what the socket's buffers allow, or with EAGAIN,
// on which the caller waits in the runtime's network poller exactly as net.Conn does, under the
// connection's deadlines. A system call that cannot block needs no hand-off of its processor,
// and telling the scheduler of one (entersyscall) costs more than the hand-off: when every
// processor was idle, as it is between the requests of a gateway that is not saturated, it
// wakes the runtime's monitor thread (sysmon), a futex call on the request's path, and the
// monitor then polls every 20 µs until it sleeps again. BENCHMARKS.md ("System calls the
// scheduler does not see") has the measurement.
//
// Errors are net.Conn's: io.EOF at the end, else a *net.OpError ("read" or "write") around the
// system call's error or the poller's (net.ErrClosed, os.ErrDeadlineExceeded). Outside Linux, and
// in builds that check memory accesses (-race, -msan, -asan; instrumented.go), the calls are
// net.Conn's own: Go's system calls are what tell those checkers that I/O orders goroutines.
package rawio
