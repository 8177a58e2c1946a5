// Package clientconn holds the proxy port's client connections: it notices a client that
// leaves while its request is served, and closes a connection without losing the answer.
//
// A [Listener] wraps a TCP listener; every connection it accepts is a [*Conn]. On Linux all of
// them are registered in one epoll set that one goroutine waits on, so noticing that a client
// left adds no system call to a request, and the gateway can release the lease and cancel the
// worker's request at once, in every phase (docs/contract.md, section "Release").
//
// Invariants, stated once:
//   - A connection is in the epoll set from Accept to its Close. Close removes it before its fd
//     is closed, inside SyscallConn().Control, which holds the fd against a concurrent close, so
//     an fd number the kernel reuses is never watched for an old connection.
//   - An event carries the connection's id, never its fd. Ids are never reused, and they are
//     looked up in a map that holds exactly the connections accepted and not yet closed: a late
//     event for a closed connection finds nothing.
//   - Events are edge-triggered and ask for no data: the client's FIN or half-close
//     (EPOLLRDHUP), reset or error (EPOLLHUP, EPOLLERR) is reported once and the connection
//     remembers it; a connection that only sends requests costs the watcher nothing.
//   - The epoll fd and its goroutine live while the listener is open or any connection it
//     accepted is, so a graceful shutdown still notices a client that leaves. They end when the
//     listener and its last connection are both closed. No goroutine is started per connection.
//   - Close sends FIN first, then reads and discards what the client still sends, for at most
//     [Options.LingerTimeout] and [Options.LingerBytes], and only then closes: bytes left
//     unread at close make the kernel answer with a reset, and the client can lose the answer
//     it was just sent (net/http's closeWriteAndWait avoids it the same way).
//
// On other systems there is no epoll set: [Conn.Watch] never calls left, so a request is
// released when its answer has been written or has failed. The close lingers the same way.
package clientconn
