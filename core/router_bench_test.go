package core

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// benchWorkerURLs returns n distinct worker URLs.
func benchWorkerURLs(n int) []string {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = "http://10.0.0." + strconv.Itoa(i) + ":8000"
	}
	return urls
}

// benchKeys returns routing keys spread over the ring.
func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte("session-" + strconv.Itoa(i))
	}
	return keys
}

// benchWorkerCounts are the membership sizes every route benchmark runs at.
var benchWorkerCounts = []int{8, 64, 256, 1024}

// Loads the route benchmarks run under.
const (
	loadsIdle = "idle"
	// loadsSkewed holds 10 leases on 5 workers of every 8: the mean is 6.25 and the bound 9.375,
	// so every request whose key prefers a loaded worker (5/8 of them) passes the relative test,
	// scans for the minimum and walks the ring to spill.
	loadsSkewed = "skewed"
	// loadsLone is loadsSkewed with one lease on every other worker but one: the least loaded
	// worker is alone, which is the least-loaded spill's costliest case (a full second scan).
	loadsLone = "lone"
)

// newBenchRouter builds a bounded router over n workers under the named loads.
func newBenchRouter(b *testing.B, n int, loads string) *Router {
	return newBenchRouterWith(b, DefaultConfig().Policy, n, loads)
}

// newBenchRouterWith builds a router with the policy over n workers under the named loads.
func newBenchRouterWith(b *testing.B, policy Policy, n int, loads string) *Router {
	b.Helper()
	urls := benchWorkerURLs(n)
	r, err := NewRouter(Config{WorkerURLs: urls, Policy: policy, VirtualNodes: DefaultVirtualNodes})
	if err != nil {
		b.Fatal(err)
	}
	for i, url := range urls {
		for j := 0; j < benchLeases(loads, i); j++ {
			if _, _, err := r.Acquire(url, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	return r
}

// benchLeases is the number of leases the named loads hold on worker i.
func benchLeases(loads string, i int) int {
	switch {
	case loads == loadsIdle:
		return 0
	case i%8 < 5:
		return 10
	case loads == loadsLone && i != 5:
		return 1
	}
	return 0
}

// reportSpills reports the share of routed requests that spilled, so a reader can check how
// often the relative test fired.
func reportSpills(b *testing.B, r *Router) {
	s := r.Stats()
	spilled := s.Branches[BranchExplicitRoutingKeySpillover]
	b.ReportMetric(float64(spilled)/float64(s.Branches[BranchExplicitRoutingKeyHit]+spilled), "spilled/op")
}

// BenchmarkRouteRelease is one request's whole life in the router: route with an explicit key,
// then release. -benchmem must show 0 allocs/op.
func BenchmarkRouteRelease(b *testing.B) {
	keys := benchKeys(4096)
	for _, n := range benchWorkerCounts {
		for _, loads := range []string{loadsIdle, loadsSkewed} {
			b.Run(fmt.Sprintf("workers=%d/loads=%s", n, loads), func(b *testing.B) {
				r := newBenchRouter(b, n, loads)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					req := KeyRequest(keys[i&4095])
					r.Release(r.Route(&req).Lease, false)
				}
				b.StopTimer()
				reportSpills(b, r)
			})
		}
	}
}

// BenchmarkRouteReleaseOptions is BenchmarkRouteRelease with each option of
// bounded_consistent_hashing, next to the default at the same workers and loads, in the same
// run: the least-loaded spill under loads that spill (and the default under the loads where the
// least-loaded spill costs most); key memory holding every key of the loop, where
// each key stays on its ring worker (idle) or goes back to the worker it spilled to (skewed);
// weighted leases of 1000 units each; SMG's ring; and the first three at once. Besides ns/op it
// reports cpu-ns/op, the CPU time of the loop's thread, which other jobs on a shared machine
// inflate far less than the wall-clock time.
func BenchmarkRouteReleaseOptions(b *testing.B) {
	keys := benchKeys(4096)
	policy := func(target SpillTarget, memory int) Policy {
		p := DefaultConfig().Policy
		p.SpillTarget, p.KeyMemory = target, memory
		return p
	}
	smg := DefaultConfig().Policy
	smg.HashRing = HashRingSMG
	options := []struct {
		name   string
		policy Policy
		loads  string
		weight int64
	}{
		{"default", policy(SpillClockwise, 0), loadsIdle, 0},
		{"default", policy(SpillClockwise, 0), loadsSkewed, 0},
		{"spill_target=least_loaded", policy(SpillLeastLoaded, 0), loadsSkewed, 0},
		{"spill_target=least_loaded", policy(SpillLeastLoaded, 0), loadsLone, 0},
		{"spill_target=clockwise", policy(SpillClockwise, 0), loadsLone, 0},
		{"key_memory=4096", policy(SpillClockwise, 4096), loadsIdle, 0},
		{"key_memory=4096", policy(SpillClockwise, 4096), loadsSkewed, 0},
		{"weight=1000", policy(SpillClockwise, 0), loadsIdle, 1000},
		{"weight=1000", policy(SpillClockwise, 0), loadsSkewed, 1000},
		{"hash_ring=smg", smg, loadsIdle, 0},
		{"hash_ring=smg", smg, loadsSkewed, 0},
		{"all", policy(SpillLeastLoaded, 4096), loadsSkewed, 1000},
	}
	for _, n := range []int{64, 1024} {
		for _, o := range options {
			b.Run(fmt.Sprintf("workers=%d/%s/loads=%s", n, o.name, o.loads), func(b *testing.B) {
				r := newBenchRouterWith(b, o.policy, n, o.loads)
				routeRelease := func(i int) {
					req := Request{RoutingKey: keys[i&4095], Weight: o.weight}
					r.Release(r.Route(&req).Lease, false)
				}
				for i := range keys { // every key is remembered before the clock starts
					routeRelease(i)
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu := startCPUClock()
				for i := 0; i < b.N; i++ {
					routeRelease(i)
				}
				b.StopTimer()
				cpu.report(b)
				reportSpills(b, r)
				s := r.Stats()
				b.ReportMetric(float64(s.Branches[BranchExplicitRoutingKeyRemembered])/float64(b.N+len(keys)), "remembered/op")
			})
		}
	}
}

// BenchmarkReleaseThenRoute is the same life as the Python binding lives it: each step releases
// the previous request's lease and routes the next request, under one lock.
func BenchmarkReleaseThenRoute(b *testing.B) {
	keys := benchKeys(4096)
	for _, n := range benchWorkerCounts {
		b.Run(fmt.Sprintf("workers=%d/loads=%s", n, loadsIdle), func(b *testing.B) {
			r := newBenchRouter(b, n, loadsIdle)
			var previous LeaseID
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := KeyRequest(keys[i&4095])
				previous = r.ReleaseThenRoute(previous, &req).Lease
			}
		})
	}
}

// BenchmarkRouteReleaseParallel runs BenchmarkRouteRelease from GOMAXPROCS goroutines at once
// on one router (they contend for its lock).
func BenchmarkRouteReleaseParallel(b *testing.B) {
	keys := benchKeys(4096)
	for _, n := range benchWorkerCounts {
		for _, loads := range []string{loadsIdle, loadsSkewed} {
			b.Run(fmt.Sprintf("workers=%d/loads=%s", n, loads), func(b *testing.B) {
				r := newBenchRouter(b, n, loads)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for i := 0; pb.Next(); i++ {
						req := KeyRequest(keys[i&4095])
						r.Release(r.Route(&req).Lease, false)
					}
				})
			})
		}
	}
}

// BenchmarkRouteKeysReleaseMany is BenchmarkRouteRelease in batches of 64 keys (RouteKeys, then
// ReleaseMany); ns/op is per request.
func BenchmarkRouteKeysReleaseMany(b *testing.B) {
	const batch = 64
	keys := benchKeys(4096)
	for _, n := range benchWorkerCounts {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			r := newBenchRouter(b, n, loadsIdle)
			ids := make([]LeaseID, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				group := keys[i&4095:][:batch]
				r.RouteKeys(batch, func(j int) []byte { return group[j] }, func(j int, d Decision) { ids[j] = d.Lease })
				r.ReleaseMany(ids)
			}
		})
	}
}

// BenchmarkAddWorker measures one worker joining a membership of 1024: the ring merge, built
// while routes go on, and the install step, the only part that holds the routing lock.
func BenchmarkAddWorker(b *testing.B) {
	urls := benchWorkerURLs(1025)
	r, err := NewRouter(DefaultConfig(urls[:1024]...))
	if err != nil {
		b.Fatal(err)
	}
	var locked time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := r.AddWorker(urls[1024]); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		// Installing the same membership again repeats the join's last step exactly.
		r.membershipMu.Lock()
		start := time.Now()
		r.install(r.members)
		locked += time.Since(start)
		r.membershipMu.Unlock()
		if err := r.RemoveWorker(urls[1024]); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(locked.Nanoseconds())/float64(b.N), "lock-held-ns/op")
}

// BenchmarkRingMemory reports the ring's bytes per virtual node at 1024 workers: positions,
// owners and the lookup table.
func BenchmarkRingMemory(b *testing.B) {
	urls := benchWorkerURLs(1024)
	var rg *ring
	for i := 0; i < b.N; i++ {
		rg = buildRing(HashRingXXH64, urls, DefaultVirtualNodes)
	}
	bytes := cap(rg.positions)*8 + cap(rg.owners)*4 + cap(rg.buckets)*4
	b.ReportMetric(float64(bytes)/float64(len(rg.positions)), "bytes/vnode")
}

// BenchmarkRingHashRouteRelease is BenchmarkRouteRelease (idle) with each hash ring: the keys
// are hashed once per route, with XXH64 or with SMG's BLAKE3.
func BenchmarkRingHashRouteRelease(b *testing.B) {
	keys := benchKeys(4096)
	for _, hash := range []HashRing{HashRingXXH64, HashRingSMG} {
		for _, n := range []int{8, 1024} {
			b.Run(fmt.Sprintf("hash_ring=%s/workers=%d", hash, n), func(b *testing.B) {
				cfg := DefaultConfig(benchWorkerURLs(n)...)
				cfg.Policy.HashRing = hash
				r, err := NewRouter(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					req := KeyRequest(keys[i&4095])
					r.Release(r.Route(&req).Lease, false)
				}
			})
		}
	}
}

// BenchmarkPolicyRouteRelease is one request's life under each of SMG's load policies and the
// default one, at the same workers and loads: power_of_two draws two workers, least_load reads
// the least load the router keeps, manual looks its key up (4096 keys, all held before the
// clock starts, within max_keys) or, with max_keys=1024, forgets and reassigns a key on most
// requests. Besides ns/op it reports cpu-ns/op, as BenchmarkRouteReleaseOptions does.
func BenchmarkPolicyRouteRelease(b *testing.B) {
	keys := benchKeys(4096)
	policies := []struct {
		name   string
		policy Policy
	}{
		{"bounded_consistent_hashing", DefaultConfig().Policy},
		{"power_of_two", Policy{Kind: PolicyPowerOfTwo}},
		{"least_load", Policy{Kind: PolicyLeastLoad}},
		{"manual/random", Policy{Kind: PolicyManual, AssignmentMode: AssignRandom, MaxKeys: DefaultMaxKeys}},
		{"manual/min_load", Policy{Kind: PolicyManual, AssignmentMode: AssignMinLoad, MaxKeys: DefaultMaxKeys}},
		{"manual/min_load/max_keys=1024", Policy{Kind: PolicyManual, AssignmentMode: AssignMinLoad, MaxKeys: 1024}},
	}
	for _, n := range []int{64, 1024} {
		for _, loads := range []string{loadsIdle, loadsSkewed} {
			for _, p := range policies {
				b.Run(fmt.Sprintf("workers=%d/loads=%s/%s", n, loads, p.name), func(b *testing.B) {
					r := newBenchRouterWith(b, p.policy, n, loads)
					routeRelease := func(i int) {
						req := KeyRequest(keys[i&4095])
						r.Release(r.Route(&req).Lease, false)
					}
					for i := range keys {
						routeRelease(i)
					}
					b.ReportAllocs()
					b.ResetTimer()
					cpu := startCPUClock()
					for i := 0; i < b.N; i++ {
						routeRelease(i)
					}
					b.StopTimer()
					cpu.report(b)
				})
			}
		}
	}
}

// BenchmarkRouteFirstTokenRelease is a request's life with its first token marked between
// route and release (docs/contract.md, "Prefill load"), beside the plain route+release, under
// the default rule and with balance_by prefill (the skewed loads' leases stay unmarked).
func BenchmarkRouteFirstTokenRelease(b *testing.B) {
	keys := benchKeys(4096)
	prefill := DefaultConfig().Policy
	prefill.BalanceBy = LoadPrefill
	for _, n := range []int{64, 1024} {
		for _, loads := range []string{loadsIdle, loadsSkewed} {
			for _, c := range []struct {
				name   string
				policy Policy
				mark   bool
			}{{"plain", DefaultConfig().Policy, false}, {"first_token", DefaultConfig().Policy, true}, {"balance_by=prefill/first_token", prefill, true}} {
				b.Run(fmt.Sprintf("workers=%d/loads=%s/%s", n, loads, c.name), func(b *testing.B) {
					r := newBenchRouterWith(b, c.policy, n, loads)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						req := KeyRequest(keys[i&4095])
						lease := r.Route(&req).Lease
						if c.mark {
							r.FirstToken(lease)
						}
						r.Release(lease, false)
					}
				})
			}
		}
	}
}
