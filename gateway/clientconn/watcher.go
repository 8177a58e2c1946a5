package clientconn

import (
	"net"
	"sync"

	"github.com/bounded-router/bounded-router/gateway/rawio"
)

// watcher maps ids to the connections accepted and not yet closed, and lives until the
// listener and all of them are closed. The poller (epoll on Linux) reports ids.
type watcher struct {
	p    *poller
	done chan struct{} // closed when the poller's goroutine has returned

	mu           sync.Mutex
	conns        map[uint64]*Conn
	lastID       uint64 // ids start at 1; 0 is the poller's own wake-up
	listenerOpen bool
	stopped      bool // the poller was told to end: no connection may be added any more
}

func newWatcher() (*watcher, error) {
	p, err := newPoller()
	if err != nil {
		return nil, err
	}
	w := &watcher{p: p, done: make(chan struct{}), conns: map[uint64]*Conn{}, listenerOpen: true}
	go func() {
		p.run(w.left)
		close(w.done)
	}()
	return w, nil
}

// add gives tc an id, puts it in the map, then in the epoll set, in that order so that its
// first event finds it.
func (w *watcher) add(tc *net.TCPConn, o Options) (*Conn, error) {
	raw, err := rawio.New(tc)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil, net.ErrClosed
	}
	w.lastID++
	c := &Conn{rawConn: raw, w: w, id: w.lastID, opts: o}
	w.conns[c.id] = c
	w.mu.Unlock()
	if err := w.p.add(raw.Raw(), c.id); err != nil {
		w.forget(c.id)
		return nil, err
	}
	return c, nil
}

// remove takes c out of the epoll set, then out of the map. Its fd must still be open.
func (w *watcher) remove(c *Conn) {
	// An error here cannot leave the fd watched: closing it drops it from the set anyway.
	_ = w.p.remove(c.Raw())
	w.forget(c.id)
}

func (w *watcher) forget(id uint64) {
	w.mu.Lock()
	delete(w.conns, id)
	w.stopIfDone()
	w.mu.Unlock()
}

func (w *watcher) listenerClosed() {
	w.mu.Lock()
	w.listenerOpen = false
	w.stopIfDone()
	w.mu.Unlock()
}

// stopIfDone ends the poller once nothing can use it: called with w.mu held.
func (w *watcher) stopIfDone() {
	if !w.listenerOpen && len(w.conns) == 0 && !w.stopped {
		w.stopped = true
		w.p.wake()
	}
}

// left is the poller's report that the client of connection id left.
func (w *watcher) left(id uint64) {
	w.mu.Lock()
	c := w.conns[id]
	w.mu.Unlock()
	if c != nil {
		c.clientLeft()
	}
}

// all is the connections accepted and not yet closed.
func (w *watcher) all() []*Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	conns := make([]*Conn, 0, len(w.conns))
	for _, c := range w.conns {
		conns = append(conns, c)
	}
	return conns
}
