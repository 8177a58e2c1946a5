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
	"github.com/bounded-router/bounded-router/health"
)

// Feeds bring the engines' own state into a router on goroutines of the library: load polls
// (loadpoll.go) and KV event subscriptions (kvevents.go). Each is a handle; br_feed_stats_json
// and br_feed_stop serve every kind.

var errInvalidFeed = invalidArgument("invalid feed handle: the feed was stopped or never started")

type feed struct {
	router *health.Monitor // a feed ends with its router (br_router_free)
	stats  func() any
	stop   context.CancelFunc
	done   chan struct{}
}

var feeds = struct {
	sync.Mutex
	running map[uint64]*feed
}{running: map[uint64]*feed{}}

// startFeed runs run on a goroutine until the feed or its router is stopped and returns its
// handle, or stops it at once when its router was freed since it was looked up (its feeds were
// stopped then: see unregisterRouter).
func startFeed(router *health.Monitor, run func(ctx context.Context), stats func() any) (uint64, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &feed{router: router, stats: stats, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		// A panic here is on the library's own goroutine, where no export's recover reaches:
		// it would end the host process. It ends this feed alone, logged.
		defer func() {
			if p := recover(); p != nil {
				log.Printf("bounded-router: a feed stopped on an internal error: %v", p)
			}
		}()
		run(ctx)
	}()
	feeds.Lock()
	freed := router != nil && router.Stopped()
	var handle uint64
	if !freed {
		handle = newHandle()
		feeds.running[handle] = f
	}
	feeds.Unlock()
	if freed {
		f.stop()
		<-f.done // what it opened, closed
		return 0, errInvalidHandle
	}
	return handle, nil
}

// stopFeedsOf stops the feeds of a router being freed and waits for them; their handles become
// invalid.
func stopFeedsOf(router *health.Monitor) {
	feeds.Lock()
	var ending []*feed
	for handle, f := range feeds.running {
		if f.router == router {
			ending = append(ending, f)
			delete(feeds.running, handle)
		}
	}
	feeds.Unlock()
	for _, f := range ending {
		f.stop()
		<-f.done
	}
}

// br_feed_stats_json writes a running feed's counters as JSON (their form is the feed's kind's:
// see br_load_poll_start and br_kv_events_start), answering like every *_json export.
//
//export br_feed_stats_json
func br_feed_stats_json(handle C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	feeds.Lock()
	f, ok := feeds.running[uint64(handle)]
	feeds.Unlock()
	if !ok {
		return C.int64_t(fail(errInvalidFeed))
	}
	n, err := writeJSON(f.stats(), buf, capacity)
	if err != nil {
		return C.int64_t(fail(err))
	}
	return n
}

// br_feed_stop stops a feed and waits for it to end (a load poll forgets the reports that
// stand). The handle becomes invalid.
//
//export br_feed_stop
func br_feed_stop(handle C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	if err := stopFeed(uint64(handle)); err != nil {
		return fail(err)
	}
	return statusOK
}

// stopFeed stops a running feed and waits for it; its handle becomes invalid.
func stopFeed(handle uint64) error {
	feeds.Lock()
	f, ok := feeds.running[handle]
	delete(feeds.running, handle)
	feeds.Unlock()
	if !ok {
		return errInvalidFeed
	}
	f.stop()
	<-f.done
	return nil
}

// memberNames is the normal form of each URL, as the router names its members (the feed's rows
// then join the worker's own); it refuses a URL that names no member, in any spelling, so that a
// typo is an error, not a worker whose feed never reaches the router, and a member named twice,
// which would be two series of one metric. what names the option.
func memberNames(members []string, urls []string, what string) ([]string, error) {
	known := map[string]bool{}
	for _, u := range members {
		known[u] = true
	}
	names := make([]string, len(urls))
	seen := map[string]string{}
	for i, u := range urls {
		normal, err := core.NormalizeWorkerURL(u)
		if err != nil || !known[normal] {
			return nil, invalidArgument("%s names %q, which is not a worker of this router", what, u)
		}
		if first, twice := seen[normal]; twice {
			return nil, invalidArgument("%s names the worker %s twice (as %q and %q)", what, normal, first, u)
		}
		seen[normal], names[i] = u, normal
	}
	return names, nil
}

// withStart checks the arguments every start export takes (a router, options as JSON, the
// out handle named outName), runs start and stores the handle it returns.
func withStart(router C.uint64_t, optionsJSON *C.char, optionsLen C.size_t, outHandle *C.uint64_t, outName string, start func(*health.Monitor, []byte) (uint64, error)) C.int32_t {
	out, err := outArg(outHandle, 1, outName)
	if err != nil {
		return fail(err)
	}
	m, err := lookupMonitor(uint64(router))
	if err != nil {
		return fail(err)
	}
	text, err := bytesArg(optionsJSON, optionsLen, "options_json")
	if err != nil {
		return fail(err)
	}
	handle, err := start(m, text)
	if err != nil {
		return fail(err)
	}
	out[0] = C.uint64_t(handle)
	return statusOK
}
