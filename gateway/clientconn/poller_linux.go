package clientconn

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// The events a connection is registered for: the client's FIN or half-close, edge-triggered so
// that it is reported once (level-triggered, it would be reported by every wait until the
// close). EPOLLHUP and EPOLLERR (a reset, an error) are always reported. syscall declares
// EPOLLET as a negative int, hence the mask.
const connEvents = syscall.EPOLLRDHUP | syscall.EPOLLET&0xffffffff

// wakeID is the id of the pipe whose write end wake closes.
const wakeID = 0

// poller is one epoll set for all the connections, and a pipe to end its wait. The set waits in
// the runtime's network poller (set is epfd as a file) rather than in a blocking epoll_wait, which
// would hold a processor until the runtime takes it back (up to 10 ms, or every processor the
// gateway has when it has only one).
type poller struct {
	epfd      int
	set       *os.File
	wakeRead  int
	wakeWrite int
}

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil { // so that os.NewFile gives it to the network poller
		syscall.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	set := os.NewFile(uintptr(epfd), "clientconn epoll")
	if err := set.SetReadDeadline(time.Time{}); err != nil { // only a file in the network poller takes one
		set.Close()
		return nil, fmt.Errorf("the epoll set cannot wait in the network poller: %w", err)
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		set.Close()
		return nil, os.NewSyscallError("pipe2", err)
	}
	p := &poller{epfd: epfd, set: set, wakeRead: fds[0], wakeWrite: fds[1]}
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
	raw, err := p.set.SyscallConn()
	if err != nil {
		panic(fmt.Errorf("clientconn: the epoll set: %w", err))
	}
	events := make([]syscall.EpollEvent, 128)
	for {
		var n int
		var waitErr error
		// A wait that does not block; with nothing to report, the network poller waits for the
		// set to have events.
		err := raw.Read(func(fd uintptr) bool {
			for waitErr = syscall.EINTR; waitErr == syscall.EINTR; {
				n, waitErr = syscall.EpollWait(int(fd), events, 0)
			}
			return n > 0 || waitErr != nil
		})
		if err == nil {
			err = waitErr
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
	p.set.Close()
}
