package clientconn

import (
	"os"
	"syscall"
)

// The events a connection is registered for: the client's FIN or half-close, edge-triggered so
// that it is reported once (level-triggered, it would be reported by every wait until the
// close). EPOLLHUP and EPOLLERR (a reset, an error) are always reported. syscall declares
// EPOLLET as a negative int, hence the mask.
const connEvents = syscall.EPOLLRDHUP | syscall.EPOLLET&0xffffffff

// wakeID is the id of the pipe whose write end wake closes.
const wakeID = 0

// poller is one epoll set for all the connections, and a pipe to end its wait.
type poller struct {
	epfd      int
	wakeRead  int
	wakeWrite int
}

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, os.NewSyscallError("pipe2", err)
	}
	p := &poller{epfd: epfd, wakeRead: fds[0], wakeWrite: fds[1]}
	if err := p.ctl(syscall.EPOLL_CTL_ADD, p.wakeRead, syscall.EPOLLIN, wakeID); err != nil {
		p.close()
		syscall.Close(p.wakeWrite)
		return nil, err
	}
	return p, nil
}

func (p *poller) ctl(op, fd int, events uint32, id uint64) error {
	ev := epollEvent(events, id)
	return os.NewSyscallError("epoll_ctl", syscall.EpollCtl(p.epfd, op, fd, &ev))
}

// epollEvent carries id in the event's 64 bits of user data (Fd and Pad in package syscall).
func epollEvent(events uint32, id uint64) syscall.EpollEvent {
	return syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

func eventID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// add registers the connection's fd under id; Control holds the fd open meanwhile.
func (p *poller) add(rc syscall.RawConn, id uint64) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) { err = p.ctl(syscall.EPOLL_CTL_ADD, int(fd), connEvents, id) }); cerr != nil {
		return cerr
	}
	return err
}

// remove unregisters the connection's fd while Control holds it: once Close releases it, the
// kernel may give its number to a new connection.
func (p *poller) remove(rc syscall.RawConn) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) { err = p.ctl(syscall.EPOLL_CTL_DEL, int(fd), 0, 0) }); cerr != nil {
		return cerr
	}
	return err
}

// run reports the id of every connection whose client left, until wake; then it closes the
// epoll set, which nothing uses any more.
func (p *poller) run(left func(id uint64)) {
	defer p.close()
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// Only a closed or invalid epfd fails here: a bug, as the runtime's netpoll treats it.
			panic(os.NewSyscallError("clientconn: epoll_wait", err))
		}
		for i := range events[:n] {
			id := eventID(&events[i])
			if id == wakeID {
				return
			}
			left(id)
		}
	}
}

// wake ends run: the pipe's read end sees EPOLLHUP once its write end is closed.
func (p *poller) wake() { syscall.Close(p.wakeWrite) }

func (p *poller) close() {
	syscall.Close(p.wakeRead)
	syscall.Close(p.epfd)
}
