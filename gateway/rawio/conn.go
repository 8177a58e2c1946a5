package rawio

import (
	"net"
	"syscall"
)

// Conn is a TCP connection whose Read and Write are this package's; every other method is
// *net.TCPConn's.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// Wrap makes a TCP connection a Conn; any other connection is returned as it is.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{TCPConn: tc, rc: rc}
}

func (c *Conn) Read(p []byte) (int, error)  { return Read(c.TCPConn, c.rc, p) }
func (c *Conn) Write(p []byte) (int, error) { return Write(c.TCPConn, c.rc, p) }
