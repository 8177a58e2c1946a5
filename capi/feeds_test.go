package main

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
)

// Regression (found by a review): a start export looked the router up, then registered the feed,
// so a br_router_free between the two stopped the router's feeds without this one, which ran on
// the freed router with a valid handle (the header: br_router_free stops the router's feeds and
// their handles become invalid). Each round races a start with the free.
func TestAFeedStartedWhileItsRouterIsFreedDoesNotOutliveIt(t *testing.T) {
	opts := []byte(`{"endpoints": {"http://127.0.0.1:9": "http://127.0.0.1:9/get_load"}, "format": "sglang", "interval_ms": 1000}`)
	leaked := 0
	for i := 0; i < 300 && leaked == 0; i++ {
		r, err := core.NewRouter(core.DefaultConfig("http://127.0.0.1:9"))
		if err != nil {
			t.Fatal(err)
		}
		h := registerRouter(health.New(r, health.Options{}))
		var feed uint64
		var started int64
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			started = call(br_load_poll_start, h, unsafe.Pointer(&opts[0]), len(opts), unsafe.Pointer(&feed))
		}()
		go func() { defer wg.Done(); call(br_router_free, h) }()
		wg.Wait()
		if started == statusOK && call(br_feed_stats_json, feed, nil, 0) >= 0 {
			leaked++
			t.Logf("iteration %d: router %d freed, its feed %d still runs", i, h, feed)
			call(br_feed_stop, feed)
		}
	}
	if leaked > 0 {
		t.Fatalf("a feed of a freed router kept running")
	}
}
