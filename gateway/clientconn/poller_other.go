//go:build !linux

package clientconn

import "syscall"

// poller does nothing where there is no epoll: no client is ever reported as leaving.
type poller struct{ woken chan struct{} }

func newPoller() (*poller, error) { return &poller{woken: make(chan struct{})}, nil }

func (*poller) add(syscall.RawConn, uint64) error { return nil }

func (*poller) remove(syscall.RawConn) error { return nil }

// run waits for wake, so that the watcher's goroutine ends as it does on Linux.
func (p *poller) run(func(uint64)) { <-p.woken }

func (p *poller) wake() { close(p.woken) }
