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

var errWroteTooMuch = errors.New("the write system call reported more bytes than it was given")

// read reads into p; it waits in the runtime's poller while the socket has nothing to read.
func (c *Conn) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, c.emptyRead()
	}
	p = p[:min(len(p), maxRW)]
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
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
		return 0, c.opError("read", pollerError(err))
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// write writes all of p; it waits in the runtime's poller while the socket's buffer is full. An
// empty p is checked as net checks it (closed, past its deadline) and writes nothing.
func (c *Conn) write(p []byte) (int, error) {
	written := 0
	var failure error
	err := c.rc.Write(func(fd uintptr) bool {
		for written < len(p) {
			chunk := p[written:][:min(len(p)-written, maxRW)]
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&chunk[0])), uintptr(len(chunk)))
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return false
			case e != 0:
				failure = os.NewSyscallError("write", e)
			case int(r) > len(chunk): // reported with some VPN software (Go issue 61060)
				failure = errWroteTooMuch
			case r == 0:
				failure = io.ErrUnexpectedEOF // as net's poller answers a write that wrote nothing
			default:
				written += int(r)
				continue
			}
			return true
		}
		return true
	})
	switch {
	case err != nil:
		return written, c.opError("write", pollerError(err))
	case failure != nil:
		return written, c.opError("write", failure)
	}
	return written, nil
}

// emptyRead is net's answer to a read of nothing: nothing, unless the connection is closed.
func (c *Conn) emptyRead() error {
	if err := c.rc.Control(func(uintptr) {}); err != nil {
		return c.opError("read", pollerError(err))
	}
	return nil
}

// Idle says whether the socket of rc is open with nothing to read, by a peek that does not
// wait: false when the peer has closed it, it failed, or it holds bytes nobody asked for.
func Idle(rc syscall.RawConn) bool {
	var b [1]byte
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		for {
			_, _, errno = syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
			if errno != syscall.EINTR {
				return true
			}
		}
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

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
