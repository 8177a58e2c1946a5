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
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
	"github.com/bounded-router/bounded-router/kvevents"
)

// br_kv_events_start starts a feed that subscribes to the workers' KV event streams and applies
// them to the router's cache_aware index (package kvevents; options as JSON, kvevents.Options)
// and stores its handle in *out_feed. Every worker named must be a member.
//
//export br_kv_events_start
func br_kv_events_start(router C.uint64_t, optionsJSON *C.char, optionsLen C.size_t, outFeed *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return withStart(router, optionsJSON, optionsLen, outFeed, "out_feed", func(m *health.Monitor, text []byte) (uint64, error) {
		r := m.Router()
		if r.Policy().Kind != core.PolicyCacheAware {
			return 0, invalidArgument("kv_events apply only to cache_aware, not %s", r.Policy().Kind)
		}
		subs, staleAfter, err := kvevents.ParseOptions(text)
		if err != nil {
			return 0, invalidArgument("%v", err)
		}
		workers := make([]string, len(subs))
		for i, s := range subs {
			s.Index, s.Logf, workers[i] = r, log.Printf, s.Worker
		}
		names, err := memberNames(memberURLs(r), workers, "kv_events options: endpoints")
		if err != nil {
			return 0, err
		}
		for i, s := range subs {
			s.Worker = names[i]
		}
		run := func(ctx context.Context) {
			var all sync.WaitGroup
			for _, s := range subs {
				all.Add(1)
				go func() {
					defer all.Done()
					s.Run(ctx)
				}()
			}
			all.Wait()
		}
		return startFeed(m, run, func() any { return kvEventStats(subs, staleAfter, time.Now()) })
	})
}

// kvEventStats is {"workers": [{"worker", counters..., "stale"}]}: stale when no batch arrived
// within staleAfter, routing then resting on this router's own routes for that worker.
func kvEventStats(subs []*kvevents.Subscriber, staleAfter time.Duration, now time.Time) any {
	workers := []map[string]any{}
	for _, s := range subs {
		st := s.Stats()
		workers = append(workers, map[string]any{
			"worker": s.Worker, "batches": st.Batches, "stored": st.Stored, "removed": st.Removed, "cleared": st.Cleared,
			"unknown_parent": st.UnknownParent, "adapter": st.Adapter, "unknown_tag": st.UnknownTag,
			"gaps": st.Gaps, "replayed": st.Replayed, "lost": st.Lost, "malformed": st.Malformed, "restarts": st.Restarts,
			"stale": st.Stale(now, staleAfter),
		})
	}
	return map[string]any{"workers": workers}
}
