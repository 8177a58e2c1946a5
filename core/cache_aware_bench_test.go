package core

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// benchConversations returns n chained prefixes of the given length, as a trace of n
// conversations would give: each group of four starts with the same system prompt (the first
// eighth of its blocks, at least one), then blocks of its own.
func benchConversations(n, blocks int) [][]uint64 {
	shared := max(blocks/8, 1)
	out := make([][]uint64, n)
	for c := range out {
		p := make([]uint64, blocks)
		for i := range p {
			if i < shared {
				p[i] = mixBlock(uint64(c/4+1)<<48 | uint64(i))
			} else {
				p[i] = mixBlock(uint64(c+1)<<32 | uint64(i))
			}
		}
		out[c] = p
	}
	return out
}

// BenchmarkCacheAwareRouteRelease is one request's life under cache_aware: route with a key and
// its prefix blocks, then release. 64 conversations take turns, each with its own key; after
// the warm-up every route is a prefix hit of the whole prefix (routes and releases keep the
// workers idle, so each group of conversations stays on the worker of its system prompt) and
// records it again. -benchmem must show 0 allocs/op.
func BenchmarkCacheAwareRouteRelease(b *testing.B) {
	const conversations = 64
	keys := benchKeys(conversations)
	for _, n := range []int{8, 64, 1024} {
		for _, blocks := range []int{1, 16, 128, 1024} {
			b.Run(fmt.Sprintf("workers=%d/blocks=%d", n, blocks), func(b *testing.B) {
				policy := cachePolicy(DefaultMaxLoadSkew, DefaultMinLoadGap, DefaultBlocksPerWorker)
				r := newBenchRouterWith(b, policy, n, loadsIdle)
				runTurns(b, warmConversations(r, keys, benchConversations(conversations, blocks)))
				b.StopTimer()
				s := r.Stats()
				b.ReportMetric(float64(s.PrefixBlocksMatched)/float64(s.PrefixBlocks), "matched/block")
			})
		}
	}
}

// BenchmarkCacheAwareHitWait is BenchmarkCacheAwareRouteRelease's request under balance_by
// prefill with hit_wait_factor off and at 6 (docs/contract.md, "Prefill load", rule 5). Idle, a
// hit is within its allowance and costs a comparison; queued (every worker holds a lease of 2^20
// not started, the gap is out of reach), every hit's queue is over its allowance, so it reads the
// least prefill load, a scan of the spillable workers (and stays: the queues are equal).
func BenchmarkCacheAwareHitWait(b *testing.B) {
	const conversations = 64
	keys := benchKeys(conversations)
	for _, n := range []int{8, 64, 1024} {
		for _, c := range []struct {
			loads  string
			factor float64
		}{{"idle", 0}, {"idle", 6}, {"queued", 0}, {"queued", 6}} {
			b.Run(fmt.Sprintf("workers=%d/%s/hit_wait_factor=%g", n, c.loads, c.factor), func(b *testing.B) {
				policy := cachePolicy(1.0, 1<<40, DefaultBlocksPerWorker)
				policy.BalanceBy, policy.CacheAware.HitWaitFactor = LoadPrefill, c.factor
				r := newBenchRouterWith(b, policy, n, loadsIdle)
				for i := 0; c.loads == "queued" && i < n; i++ {
					if _, _, err := r.AcquireWeighted(r.Workers()[i].URL, nil, 1<<20); err != nil {
						b.Fatal(err)
					}
				}
				runTurns(b, warmConversations(r, keys, benchConversations(conversations, 16)))
			})
		}
	}
}

// BenchmarkCacheAwareIndexMemory reports the heap bytes per indexed (worker, block) pair: 64
// workers whose indexes are filled to blocks_per_worker with distinct blocks.
func BenchmarkCacheAwareIndexMemory(b *testing.B) {
	b.Run("routed", func(b *testing.B) {
		benchIndexMemory(b, func(r *Router, w int, url string, blocks []uint64) {
			req := Request{HasTarget: true, TargetIndex: w, PrefixBlocks: blocks}
			r.Release(r.Route(&req).Lease, false)
		})
	})
	// Blocks the engines report under names of their own: each also has an engine name.
	b.Run("reported", func(b *testing.B) {
		names := make([]uint64, 1<<14)
		benchIndexMemory(b, func(r *Router, w int, url string, blocks []uint64) {
			for j, block := range blocks {
				names[j] = ^block
			}
			if err := r.StoreBlocks(url, blocks, names); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// benchIndexMemory fills 64 workers' indexes with 16,384 blocks each through fill and reports
// the heap bytes per indexed block.
func benchIndexMemory(b *testing.B, fill func(r *Router, w int, url string, blocks []uint64)) {
	const workers, perWorker = 64, 1 << 14
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := newBenchRouterWith(b, cachePolicy(DefaultMaxLoadSkew, DefaultMinLoadGap, perWorker), workers, loadsIdle)
		urls := r.Workers()
		blocks := make([]uint64, perWorker)
		for w := 0; w < workers; w++ {
			for j := range blocks {
				blocks[j] = mixBlock(uint64(w)<<32 | uint64(j))
			}
			fill(r, w, urls[w].URL, blocks)
		}
		blocks = nil
		runtime.GC()
		runtime.ReadMemStats(&after)
		indexed := r.Stats().IndexedBlocks
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(indexed), "bytes/block")
		runtime.KeepAlive(r)
	}
}

// BenchmarkCacheAwareRouteWithReports is BenchmarkCacheAwareRouteRelease (64 workers, 128
// blocks) while another goroutine applies engine reports at a fixed rate, as a KV event
// consumer does: each report stores 4 new blocks on one worker and removes 4 older ones, so the
// index keeps its size. The route waits for the router's lock while a report holds it; the
// difference with reports=0 is that wait.
func BenchmarkCacheAwareRouteWithReports(b *testing.B) {
	const conversations, workers, blocks = 64, 64, 128
	keys := benchKeys(conversations)
	for _, perSecond := range []int{0, 10000} {
		b.Run(fmt.Sprintf("reports_per_s=%d", perSecond), func(b *testing.B) {
			r := newBenchRouterWith(b, cachePolicy(DefaultMaxLoadSkew, DefaultMinLoadGap, DefaultBlocksPerWorker), workers, loadsIdle)
			run := warmConversations(r, keys, benchConversations(conversations, blocks))
			stop, done, applied := make(chan struct{}), make(chan struct{}), 0
			if perSecond > 0 {
				go func() {
					defer close(done)
					urls := r.Workers()
					// A ticker cannot tick every 100 µs on a busy machine: apply a millisecond's
					// reports at each tick instead.
					ticker := time.NewTicker(time.Millisecond)
					defer ticker.Stop()
					stored, old := make([]uint64, 4), make([]uint64, 4)
					for n := uint64(0); ; {
						select {
						case <-stop:
							return
						case <-ticker.C:
						}
						for range perSecond / 1000 {
							applyReport(r, urls, n, stored, old)
							n++
							applied++
						}
					}
				}()
			} else {
				close(done)
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				run(i)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			close(stop)
			<-done
			if perSecond > 0 {
				b.ReportMetric(float64(applied)/elapsed.Seconds(), "reports/s")
			}
		})
	}
}

// BenchmarkReport is one engine report as the KV event consumer applies it: store 4 new blocks
// on a worker, remove 4 older ones; the time it holds the router's lock.
func BenchmarkReport(b *testing.B) {
	const workers = 64
	r := newBenchRouterWith(b, cachePolicy(DefaultMaxLoadSkew, DefaultMinLoadGap, DefaultBlocksPerWorker), workers, loadsIdle)
	urls := r.Workers()
	stored, old := make([]uint64, 4), make([]uint64, 4)
	b.ReportAllocs()
	for n := uint64(0); n < uint64(b.N)+workers; n++ {
		if n == workers {
			b.ResetTimer()
		}
		applyReport(r, urls, n, stored, old)
	}
}

// applyReport applies engine report n: 4 new blocks stored on worker n mod workers, and, from
// the second round on, the blocks of report n - workers removed, so the index keeps its size.
func applyReport(r *Router, urls []WorkerState, n uint64, stored, old []uint64) {
	workers := uint64(len(urls))
	for j := range stored {
		stored[j] = mixBlock(1<<63 | n<<2 | uint64(j))
		old[j] = mixBlock(1<<63 | (n-workers)<<2 | uint64(j))
	}
	_ = r.StoreBlocks(urls[n%workers].URL, stored, nil)
	if n >= workers {
		_ = r.RemoveBlocks(urls[(n-workers)%workers].URL, old)
	}
}

// runTurns times b.N turns of run (from warmConversations), allocations reported.
func runTurns(b *testing.B, run func(i int)) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(i)
	}
}

// warmConversations returns one request's life (route conversation i mod n with its key and
// prefix, release) after running every conversation twice, so each has its worker.
func warmConversations(r *Router, keys [][]byte, prefixes [][]uint64) func(i int) {
	run := func(i int) {
		req := Request{RoutingKey: keys[i%len(prefixes)], PrefixBlocks: prefixes[i%len(prefixes)]}
		r.Release(r.Route(&req).Lease, false)
	}
	for i := 0; i < 2*len(prefixes); i++ {
		run(i)
	}
	return run
}
