//go:build !linux

package rawio

import "syscall"

func (c *Conn) read(p []byte) (int, error)  { return c.TCPConn.Read(p) }
func (c *Conn) write(p []byte) (int, error) { return c.TCPConn.Write(p) }

// Idle says whether the socket of rc is open with nothing to read, by a peek that does not wait.
func Idle(rc syscall.RawConn) bool {
	open := false
	var b [1]byte
	err := rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = err == syscall.EAGAIN
		return true
	})
	return err == nil && open
}
