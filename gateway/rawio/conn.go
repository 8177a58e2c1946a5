package rawio

import (
	"io"
	"net"
	"sync"
	"syscall"
)

// Conn is a TCP connection whose Read, Write, ReadFrom and WriteTo are this package's; every
// other method is *net.TCPConn's. (ReadFrom and WriteTo are its own so that a copy, such as a
// bufio.Writer handing a large body over, cannot reach *net.TCPConn's, which use net's calls.)
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// New makes tc a Conn.
func New(tc *net.TCPConn) (*Conn, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &Conn{TCPConn: tc, rc: rc}, nil
}

// Wrap makes a TCP connection a Conn; any other connection is returned as it is.
func Wrap(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		if rc, err := New(tc); err == nil {
			return rc
		}
	}
	return c
}

// Raw is the connection's raw connection, made once by New: a caller that looks at the socket
// per request (the transport's peek at a pooled connection, the client watcher) allocates
// nothing for it.
func (c *Conn) Raw() syscall.RawConn { return c.rc }

// SyscallConn is Raw, as syscall.Conn asks.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

func (c *Conn) Read(p []byte) (int, error) {
	if instrumented {
		return c.TCPConn.Read(p)
	}
	return c.read(p)
}

func (c *Conn) Write(p []byte) (int, error) {
	if instrumented {
		return c.TCPConn.Write(p)
	}
	return c.write(p)
}

// ReadFrom copies r to the connection through Write.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) { return copyPooled(writerOnly{c}, readerOnly{r}) }

// WriteTo copies the connection to w through Read.
func (c *Conn) WriteTo(w io.Writer) (int64, error) { return copyPooled(writerOnly{w}, readerOnly{c}) }

// writerOnly and readerOnly hide ReadFrom and WriteTo, so that a copy uses the pooled buffer.
type (
	writerOnly struct{ io.Writer }
	readerOnly struct{ io.Reader }
)

// copyBuffers are the copies' buffers, io.Copy's size, kept so that a copy per answer
// allocates nothing.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func copyPooled(w io.Writer, r io.Reader) (int64, error) {
	b := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(b)
	return io.CopyBuffer(w, r, *b)
}
