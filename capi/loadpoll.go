package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"context"
	"log"
	"sync"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/loadpoll"
)

// Load pollers (package loadpoll): a goroutine per router that polls the workers' load
// endpoints and reports the loads to the router (docs/contract.md, "Engine load reports").

var errInvalidLoadPoller = invalidArgument("invalid load poller handle: the poller was stopped or never started")

type runningPoller struct {
	poller *loadpoll.Poller
	stop   context.CancelFunc
	done   chan struct{}
}

var loadPollers = struct {
	sync.Mutex
	next    uint64
	running map[uint64]*runningPoller
}{running: map[uint64]*runningPoller{}}

// br_load_poll_start starts polling with options as JSON (loadpoll.Options) and stores the
// poller's handle in *out_poller. Every worker named must be a member of the router.
//
//export br_load_poll_start
func br_load_poll_start(router C.uint64_t, optionsJSON *C.char, optionsLen C.size_t, outPoller *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	out, err := outArg(outPoller, 1, "out_poller")
	if err != nil {
		return fail(err)
	}
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	text, err := bytesArg(optionsJSON, optionsLen, "options_json")
	if err != nil {
		return fail(err)
	}
	targets, cfg, err := loadpoll.ParseOptions(text)
	if err != nil {
		return fail(invalidArgument("%v", err))
	}
	if err := checkMembers(r, targets); err != nil {
		return fail(err)
	}
	p, err := loadpoll.New(r, targets, cfg, nil, log.Printf)
	if err != nil {
		return fail(invalidArgument("%v", err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	running := &runningPoller{poller: p, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(running.done)
		p.Run(ctx)
	}()
	loadPollers.Lock()
	defer loadPollers.Unlock()
	loadPollers.next++
	loadPollers.running[loadPollers.next] = running
	out[0] = C.uint64_t(loadPollers.next)
	return statusOK
}

// checkMembers refuses targets that name no member, so that a typo is an error, not a worker
// whose polls all fail.
func checkMembers(r *core.Router, targets []loadpoll.Target) error {
	members := map[string]bool{}
	for _, w := range r.Workers() {
		members[w.URL] = true
	}
	for _, t := range targets {
		if !members[t.Worker] {
			return invalidArgument("load poll options: endpoints names %q, which is not a worker of this router", t.Worker)
		}
	}
	return nil
}

// br_load_poll_stats_json writes {"workers": [{"worker", "reports", "failures": {kind: n},
// "expired", "standing"}]} of a running poller, answering like every *_json export.
//
//export br_load_poll_stats_json
func br_load_poll_stats_json(handle C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	loadPollers.Lock()
	running, ok := loadPollers.running[uint64(handle)]
	loadPollers.Unlock()
	if !ok {
		return C.int64_t(fail(errInvalidLoadPoller))
	}
	workers := []map[string]any{}
	for _, s := range running.poller.Stats() {
		workers = append(workers, map[string]any{"worker": s.Worker, "reports": s.Reports, "failures": s.Failures, "expired": s.Expired, "standing": s.Standing})
	}
	n, err := writeJSON(map[string]any{"workers": workers}, buf, capacity)
	if err != nil {
		return C.int64_t(fail(err))
	}
	return n
}

// br_load_poll_stop stops a poller, waits for its polls in flight (each bounded by its timeout)
// and forgets the reports that stand. The handle becomes invalid.
//
//export br_load_poll_stop
func br_load_poll_stop(handle C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	loadPollers.Lock()
	running, ok := loadPollers.running[uint64(handle)]
	delete(loadPollers.running, uint64(handle))
	loadPollers.Unlock()
	if !ok {
		return fail(errInvalidLoadPoller)
	}
	running.stop()
	<-running.done
	return statusOK
}
