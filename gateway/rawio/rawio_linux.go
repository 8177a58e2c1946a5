package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// maxRW bounds one read or write, as Go's poller does for stream sockets.
const maxRW = 1 << 30

// Read reads into p from c, whose raw connection is rc; it waits in the runtime's poller while
// the socket has nothing to read.
func Read(c *net.TCPConn, rc syscall.RawConn, p []byte) (int, error) {
	if raceEnabled {
		return c.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), maxRW)]
	var n int
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // the poller waits for the socket, then calls again
			case 0:
				n = int(r)
			default:
				errno = e
			}
			return true
		}
	})
	switch {
	case err != nil:
		return 0, opError("read", c, pollerError(err))
	case errno != 0:
		return 0, opError("read", c, os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p to c, whose raw connection is rc; it waits in the runtime's poller while
// the socket's buffer is full.
func Write(c *net.TCPConn, rc syscall.RawConn, p []byte) (int, error) {
	if raceEnabled {
		return c.Write(p)
	}
	written := 0
	var errno syscall.Errno
	err := rc.Write(func(fd uintptr) bool {
		for written < len(p) {
			chunk := p[written:][:min(len(p)-written, maxRW)]
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&chunk[0])), uintptr(len(chunk)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			case 0:
				written += int(r)
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return written, opError("write", c, pollerError(err))
	case errno != 0:
		return written, opError("write", c, os.NewSyscallError("write", errno))
	}
	return written, nil
}

// Idle says whether the socket of rc is open with nothing to read, by a peek that does not
// wait: false when the peer has closed it, it failed, or it holds bytes nobody asked for.
func Idle(rc syscall.RawConn) bool {
	var b [1]byte
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		_, _, errno = syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		return true
	})
	return err == nil && errno == syscall.EAGAIN
}

// pollerError is the poller's own error inside the raw connection's (net.ErrClosed, a
// deadline's), which net.Conn's Read and Write return under their own operation's name.
func pollerError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err
	}
	return err
}

func opError(op string, c *net.TCPConn, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
