package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cachePolicy(skew float64, gap int64, blocks int) Policy {
	return Policy{Kind: PolicyCacheAware, MaxLoadSkew: skew, MinLoadGap: gap, CacheAware: CacheAwareSettings{BlocksPerWorker: blocks, CacheThreshold: DefaultCacheThreshold}}
}

// prefixRequest is a request with the blocks and, when key is not empty, an explicit key.
func prefixRequest(key string, blocks ...uint64) *Request {
	req := &Request{PrefixBlocks: blocks}
	if key != "" {
		req.RoutingKey = []byte(key)
	}
	return req
}

// routeTo routes the blocks to the worker at index i through X-SMG-Target-Worker and releases
// the lease at once: afterwards the worker holds the blocks and its load is unchanged.
func routeTo(t testing.TB, r *Router, i int, blocks ...uint64) {
	t.Helper()
	req := &Request{HasTarget: true, TargetIndex: i, PrefixBlocks: blocks}
	d := r.Route(req)
	require.Equal(t, BranchTargetWorkerHit, d.Branch)
	require.True(t, r.Release(d.Lease, false))
}

func indexedBlocks(r *Router) []int {
	var out []int
	for _, w := range r.Workers() {
		out = append(out, w.IndexedBlocks)
	}
	return out
}

func TestCacheAwareLongestPrefixWins(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	routeTo(t, r, 1, 1, 2)
	routeTo(t, r, 2, 1, 2, 3)
	routeTo(t, r, 3, 7, 8, 9)
	assert.Equal(t, []int{0, 2, 3, 3}, indexedBlocks(r))

	d := r.Route(prefixRequest("", 1, 2, 3, 4))
	assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	// A key does not override a longer match: it only breaks ties.
	d2 := r.Route(prefixRequest("any-key", 1, 2, 5))
	assert.Equal(t, BranchCacheAwarePrefixHit, d2.Branch)
	assert.Contains(t, []string{urls[1], urls[2]}, d2.WorkerURL)

	s := r.Stats()
	assert.Equal(t, uint64(2+3+3+4+3), s.PrefixBlocks, "every routed request's blocks, target hits included")
	assert.Equal(t, uint64(0+0+0+3+2), s.PrefixBlocksMatched)
	assert.Equal(t, 2+4+3+1, s.IndexedBlocks, "worker 2 now holds 1,2,3,4 and worker 1 or 2 holds 5 too")
}

func TestCacheAwareKeyBreaksTiesClockwise(t *testing.T) {
	urls := workerURLs(5)
	ring := newRefRing(urls, DefaultVirtualNodes)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	routeTo(t, r, 1, 10, 11)
	routeTo(t, r, 3, 10, 11)
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} {
		want := ring.firstWhere([]byte(key), func(u string) bool { return u == urls[1] || u == urls[3] })
		d := r.Select(prefixRequest(key, 10, 11, 12))
		assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
		assert.Equal(t, want, d.WorkerURL, key)
	}
}

// A key does not pull a prefix hit onto a busier holder: among the holders of the longest
// prefix the least loaded wins, the key breaking ties only (issue 21, item 4).
func TestCacheAwareKeyedHitTakesTheLeastLoadedHolder(t *testing.T) {
	urls := workerURLs(4)
	r, _ := routerWithLoads(t, cachePolicy(1.5, 2, 64), urls, []int{0, 0, 0, 1})
	routeTo(t, r, 1, 10, 11)
	routeTo(t, r, 3, 10, 11)
	key := keyPreferringURL(t, urls, urls[3])
	d := r.Select(prefixRequest(string(key), 10, 11, 12))
	assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
	assert.Equal(t, urls[1], d.WorkerURL)
}

func TestCacheAwareWithoutMatch(t *testing.T) {
	urls := workerURLs(4)
	ring := newRefRing(urls, DefaultVirtualNodes)
	r, _ := routerWithLoads(t, cachePolicy(1.5, 2, 64), urls, []int{1, 0, 1, 2})

	// No match, a key: the key's ring worker when it is not above the mean load (1 here)...
	key := keyPreferringURL(t, urls, urls[2])
	d := r.Select(prefixRequest(string(key), 40, 41))
	assert.Equal(t, BranchCacheAwareKeyHit, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	// ...else the next one clockwise that is not: w3 (load 2) passes the bound but is above it.
	key = keyPreferringURL(t, urls, urls[3])
	d = r.Select(prefixRequest(string(key), 40, 41))
	assert.Equal(t, BranchCacheAwareKeyHit, d.Branch)
	assert.Equal(t, ring.firstWhere(key, func(u string) bool { return u != urls[3] }), d.WorkerURL)

	// No match, no key: the first block the match did not reach (40) stands for the key.
	d = r.Select(prefixRequest("", 40, 41))
	assert.Equal(t, BranchCacheAwareNoMatch, d.Branch)
	assert.Equal(t, ring.firstFrom(murmurFinalizer(40), func(u string) bool { return u != urls[3] }), d.WorkerURL)

	// All idle: clockwise from the first block's mixed position.
	r2 := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	for _, b := range []uint64{0, 1, 2, 3, 1 << 40} {
		want := ring.orderFrom(murmurFinalizer(b))[0]
		assert.Equal(t, want, r2.Select(prefixRequest("", b, 99)).WorkerURL, "block %d", b)
	}
	// No key and no blocks: membership order.
	assert.Equal(t, urls[0], r2.Select(&Request{}).WorkerURL)
	assert.Equal(t, BranchCacheAwareNoMatch, r2.Select(&Request{}).Branch)
}

// murmurFinalizer restates MurmurHash3's fmix64 from its reference, for the tie test.
func murmurFinalizer(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

func TestCacheAwareBalance(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	routeTo(t, r, 1, 1, 2)
	routeTo(t, r, 2, 1, 2, 3)
	holdLoads(t, r, []int{0, 0, 6, 0}) // mean 1.5, bound 2.25: worker 2 is overloaded
	d := r.Route(prefixRequest("", 1, 2, 3))
	assert.Equal(t, BranchCacheAwareBalance, d.Branch, "worker 2 holds more but is overloaded")
	assert.Equal(t, urls[1], d.WorkerURL, "the longest match among the others")

	// Only the overloaded worker matches at all: a miss, still a balance.
	routeTo(t, r, 2, 50)
	d = r.Select(prefixRequest("", 50))
	assert.Equal(t, BranchCacheAwareBalance, d.Branch)
	// Loads are now 0, 1, 6, 0 (mean 1.75): clockwise from block 50's position, not worker 2.
	want := newRefRing(urls, DefaultVirtualNodes).firstFrom(murmurFinalizer(50), func(u string) bool { return u != urls[2] })
	assert.Equal(t, want, d.WorkerURL)
}

func TestCacheAwareHonoursTheTargetHeader(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	routeTo(t, r, 0, 1, 2, 3)
	d := r.Select(&Request{HasTarget: true, TargetIndex: 2, PrefixBlocks: []uint64{1, 2, 3}})
	assert.Equal(t, BranchTargetWorkerHit, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	d = r.Route(&Request{HasTarget: true, TargetIndex: 7, PrefixBlocks: []uint64{1, 2, 3}})
	assert.Equal(t, BranchTargetWorkerMiss, d.Branch)
	assert.Equal(t, []int{3, 0, 0}, indexedBlocks(r), "a miss records nothing")
}

func TestCacheAwareHealthAndMembership(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	routeTo(t, r, 1, 1, 2, 3)

	// An unhealthy worker keeps its index (its cache may survive) but is never chosen, and its
	// longer match does not make a balance.
	require.NoError(t, r.SetHealthy(urls[1], false))
	assert.Equal(t, []int{0, 3, 0}, indexedBlocks(r))
	d := r.Select(prefixRequest("", 1, 2, 3))
	assert.NotEqual(t, urls[1], d.WorkerURL)
	assert.Equal(t, BranchCacheAwareNoMatch, d.Branch)
	require.NoError(t, r.SetHealthy(urls[1], true))
	assert.Equal(t, urls[1], r.Select(prefixRequest("", 1, 2, 3)).WorkerURL)

	// A removed worker's index is forgotten, also when the same URL joins again.
	require.NoError(t, r.RemoveWorker(urls[1]))
	assert.Zero(t, r.Stats().IndexedBlocks)
	require.NoError(t, r.AddWorker(urls[1]))
	assert.Equal(t, []int{0, 0, 0}, indexedBlocks(r))
	assert.Equal(t, BranchCacheAwareNoMatch, r.Select(prefixRequest("", 1, 2, 3)).Branch)

	// SetWorkers forgets the workers that leave only (urls[1] is now last in membership order).
	routeTo(t, r, 0, 5)
	routeTo(t, r, 2, 6)
	require.NoError(t, r.SetWorkers([]string{urls[0], urls[2]}))
	assert.Equal(t, []int{1, 0}, indexedBlocks(r))
	assert.Equal(t, 1, r.Stats().IndexedBlocks)
}

func TestCacheAwareIndexStaysWithinCapacity(t *testing.T) {
	r := newTestRouter(t, cachePolicy(1.5, 2, 5), workerURLs(2))
	d := r.Route(prefixRequest("", 1, 2, 3, 4, 5, 6, 7, 8))
	assert.Equal(t, 5, r.Stats().IndexedBlocks)
	// The beginning of the prefix stayed: a request sharing it matches it.
	d2 := r.Select(prefixRequest("", 1, 2, 3, 4, 5, 6))
	assert.Equal(t, BranchCacheAwarePrefixHit, d2.Branch)
	assert.Equal(t, d.WorkerURL, d2.WorkerURL)
}

// Random operations keep the index consistent, within capacity and free of removed workers;
// every choice is an available member.
func TestCacheAwareRandomOperations(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	runCacheAwareOps(t, 4000, rng.IntN)
}

// FuzzCacheAware runs the operations of TestCacheAwareRandomOperations as the input decides them.
func FuzzCacheAware(f *testing.F) {
	f.Add([]byte{9, 0, 3, 9, 1, 4, 9, 0, 5, 0, 1, 2, 1, 9, 2, 2})
	f.Add([]byte{19, 5, 1, 19, 5, 0, 1, 3, 0, 19, 5, 1, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		i := 0
		next := func(n int) int {
			if i >= len(data) {
				return 0
			}
			i++
			return int(data[i-1]) % n
		}
		runCacheAwareOps(t, len(data)/2, next)
	})
}

// runCacheAwareOps applies steps operations chosen by intN (a source of integers in [0, n))
// and checks the index and each choice after every one; then it releases every lease.
func runCacheAwareOps(t *testing.T, steps int, intN func(n int) int) {
	pool := workerURLs(6)
	r := newTestRouter(t, cachePolicy(1.25, 1, 7), pool[:4])
	prefixes := prefixTree(rand.New(rand.NewPCG(5, 6)), 12, 6)
	var leases []LeaseID
	for step := 0; step < steps; step++ {
		switch op := intN(20); {
		case op == 0:
			_ = r.SetHealthy(pool[intN(len(pool))], intN(3) > 0)
		case op == 1 && len(r.Workers()) > 1:
			_ = r.RemoveWorker(pool[intN(len(pool))])
		case op == 2:
			_ = r.AddWorker(pool[intN(len(pool))])
		case op < 8 && len(leases) > 0:
			i := intN(len(leases))
			r.Release(leases[i], false)
			leases = slices.Delete(leases, i, i+1)
		default:
			blocks := prefixes[intN(len(prefixes))]
			key := ""
			if intN(2) == 0 {
				key = string(rune('a' + intN(8)))
			}
			d := r.Route(prefixRequest(key, blocks...))
			if d.Lease != 0 {
				leases = append(leases, d.Lease)
				checkChosenAvailable(t, r, d)
			}
		}
		r.mu.Lock()
		checkIndex(t, r.view.blocks, r.members.workers)
		r.mu.Unlock()
	}
	releaseAll(t, r, leases)
	assert.Zero(t, r.Stats().ActiveLeases)
}

func checkChosenAvailable(t testing.TB, r *Router, d Decision) {
	t.Helper()
	for _, w := range r.Workers() {
		if w.URL == d.WorkerURL {
			require.True(t, w.Healthy)
			require.Equal(t, d.WorkerID, w.ID, "chose a removed worker")
			return
		}
	}
	t.Fatalf("chose %s, not a member", d.WorkerURL)
}

// prefixTree returns n chained prefixes of up to depth blocks that share beginnings: each
// extends a random earlier one (or starts afresh) by one to three blocks.
func prefixTree(rng *rand.Rand, n, depth int) [][]uint64 {
	var out [][]uint64
	next := uint64(1)
	for len(out) < n {
		var base []uint64
		if len(out) > 0 && rng.IntN(4) > 0 {
			base = out[rng.IntN(len(out))]
		}
		p := slices.Clone(base)
		for k := 1 + rng.IntN(3); k > 0 && len(p) < depth; k-- {
			p = append(p, next)
			next++
		}
		out = append(out, p)
	}
	return out
}

func TestCacheAwareRouteAllocatesNothingOnceWarm(t *testing.T) {
	urls := workerURLs(8)
	r := newTestRouter(t, cachePolicy(1.5, 2, 256), urls)
	prefixes := prefixTree(rand.New(rand.NewPCG(3, 4)), 32, 40)
	step := 0
	run := func() {
		req := prefixRequest("", prefixes[step%len(prefixes)]...)
		if step%3 == 0 {
			req.RoutingKey = []byte("k")
		}
		r.Release(r.Route(req).Lease, false)
		step++
	}
	for range 2000 {
		run()
	}
	assert.Zero(t, testing.AllocsPerRun(1000, run))
}

// newConversations routes n requests, each a shared first block and four blocks of its own,
// holding every lease (a fleet under load), and returns how many each worker received.
func newConversations(r *Router, n int) []int {
	received := make([]int, len(r.Workers()))
	index := map[uint32]int{}
	for i, w := range r.Workers() {
		index[w.ID] = i
	}
	for c := range n {
		own := uint64(1000 + 10*c)
		d := r.Route(prefixRequest("", 1, own, own+1, own+2, own+3))
		received[index[d.WorkerID]]++
	}
	return received
}

func TestCacheAwareAPrefixEveryWorkerSoonHoldsDoesNotStarveTheOthers(t *testing.T) {
	// Regression: with any match deciding, the shared first block sent every new conversation
	// to the workers that already held it, and under the relative bound (the mean, which idle
	// workers pull down) a worker that had received nothing was never chosen.
	urls := workerURLs(8)
	starving := cachePolicy(1.5, 2, 1024)
	starving.CacheAware.CacheThreshold = 0
	r := newTestRouter(t, starving, urls)
	assert.Contains(t, newConversations(r, 64), 0, "without a threshold some worker receives nothing")

	r = newTestRouter(t, cachePolicy(1.5, 2, 1024), urls)
	received := newConversations(r, 64)
	assert.NotContains(t, received, 0, "with cache_threshold %v every worker receives new conversations: %v", DefaultCacheThreshold, received)
	// A follow-up turn (the conversation's blocks and one more) still finds its worker.
	first := r.Route(prefixRequest("", 1, 1000, 1001, 1002, 1003, 1004))
	assert.Equal(t, BranchCacheAwarePrefixHit, first.Branch)
}

func TestCacheAwareAMatchNotOverTheThresholdIsNoHit(t *testing.T) {
	// The contract's vector: 1 of 4 blocks matched is not more than 0.3 of them.
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), workerURLs(4))
	routeTo(t, r, 0, 60)
	assert.Equal(t, BranchCacheAwareNoMatch, r.Route(prefixRequest("", 60, 61, 62, 63)).Branch)
	// Two of four is more than 0.3 of them: a prefix hit on the holder.
	r = newTestRouter(t, cachePolicy(1.5, 2, 64), workerURLs(4))
	routeTo(t, r, 0, 60, 61)
	d := r.Route(prefixRequest("", 60, 61, 62, 63))
	assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
	assert.Equal(t, workerURLs(4)[0], d.WorkerURL)
}
