package main

// #include <stdint.h>
import "C"

import (
	"sync"
	"sync/atomic"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
)

// handles maps the opaque integers C holds to routers, each with the health monitor that
// finishes its leases and probes its workers. Lookups read an immutable map through
// an atomic pointer (no lock on the request path); creating or closing a router copies it.
// Handles are never reused, so a closed handle stays invalid.
var handles = struct {
	mu      sync.Mutex
	routers atomic.Pointer[map[uint64]*health.Monitor]
}{}

// lastHandle numbers every handle of the library, routers, feeds and gateways alike, so that a
// handle of one kind never names one of another.
var lastHandle atomic.Uint64

func newHandle() uint64 { return lastHandle.Add(1) }

func init() {
	empty := map[uint64]*health.Monitor{}
	handles.routers.Store(&empty)
}

func lookupRouter(handle uint64) (*core.Router, error) {
	m, err := lookupMonitor(handle)
	if err != nil {
		return nil, err
	}
	return m.Router(), nil
}

func lookupMonitor(handle uint64) (*health.Monitor, error) {
	if m, ok := (*handles.routers.Load())[handle]; ok {
		return m, nil
	}
	return nil, errInvalidHandle
}

func registerRouter(r *health.Monitor) uint64 {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	handle := newHandle()
	updateHandles(func(m map[uint64]*health.Monitor) { m[handle] = r })
	return handle
}

// unregisterRouter closes a handle and stops its router's feeds and probes.
func unregisterRouter(handle uint64) error {
	handles.mu.Lock()
	m, ok := (*handles.routers.Load())[handle]
	if ok {
		updateHandles(func(m map[uint64]*health.Monitor) { delete(m, handle) })
	}
	handles.mu.Unlock()
	if !ok {
		return errInvalidHandle
	}
	m.Stop() // first: a feed start that looked the router up before it left sees it stopped
	stopFeedsOf(m)
	return nil
}

// updateHandles publishes a modified copy of the table; the caller holds handles.mu.
func updateHandles(change func(map[uint64]*health.Monitor)) {
	current := *handles.routers.Load()
	next := make(map[uint64]*health.Monitor, len(current)+1)
	for h, r := range current {
		next[h] = r
	}
	change(next)
	handles.routers.Store(&next)
}

// withRouter runs do on the router of a handle and answers with its status.
func withRouter(router C.uint64_t, do func(*core.Router) error) C.int32_t {
	r, err := lookupRouter(uint64(router))
	if err == nil {
		err = do(r)
	}
	if err != nil {
		return fail(err)
	}
	return statusOK
}
