package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"log"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
	"github.com/bounded-router/bounded-router/loadpoll"
)

// br_load_poll_start starts a feed that polls the workers' load endpoints and reports the
// loads to the router (package loadpoll; options as JSON, loadpoll.Options) and stores its
// handle in *out_feed. Every worker named must be a member.
//
//export br_load_poll_start
func br_load_poll_start(router C.uint64_t, optionsJSON *C.char, optionsLen C.size_t, outFeed *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return withStart(router, optionsJSON, optionsLen, outFeed, "out_feed", func(m *health.Monitor, text []byte) (uint64, error) {
		r := m.Router()
		targets, cfg, err := loadpoll.ParseOptions(text)
		if err != nil {
			return 0, invalidArgument("%v", err)
		}
		workers := make([]string, len(targets))
		for i, t := range targets {
			workers[i] = t.Worker
		}
		names, err := memberNames(memberURLs(r), workers, "load poll options: endpoints")
		if err != nil {
			return 0, err
		}
		for i := range targets {
			targets[i].Worker = names[i]
		}
		p, err := loadpoll.New(r, targets, cfg, nil, log.Printf)
		if err != nil {
			return 0, invalidArgument("%v", err)
		}
		return startFeed(m, p.Run, func() any { return loadPollStats(p) })
	})
}

// loadPollStats is {"workers": [{"worker", "reports", "failures": {kind: n}, "expired", "standing"}]}.
func loadPollStats(p *loadpoll.Poller) any {
	workers := []map[string]any{}
	for _, s := range p.Stats() {
		workers = append(workers, map[string]any{"worker": s.Worker, "reports": s.Reports, "failures": s.Failures, "expired": s.Expired, "standing": s.Standing})
	}
	return map[string]any{"workers": workers}
}

func memberURLs(r *core.Router) []string {
	var urls []string
	for _, w := range r.Workers() {
		urls = append(urls, w.URL)
	}
	return urls
}
