package core

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdQueues takes, on the i-th member, waiting[i] leases that have not seen their first token
// and started[i] that have (docs/contract.md, "Prefill load"), each of weight 1.
func holdQueues(t testing.TB, r *Router, waiting, started []int) []LeaseID {
	t.Helper()
	ids := holdLoads(t, r, waiting)
	for i, n := range started {
		for j := 0; j < n; j++ {
			id, _, err := r.Acquire(r.Workers()[i].URL, nil)
			require.NoError(t, err)
			require.True(t, r.FirstToken(id))
			ids = append(ids, id)
		}
	}
	return ids
}

func prefillOf(r *Router) (loads, requests []int64) {
	for _, w := range r.Workers() {
		loads, requests = append(loads, w.PrefillLoad), append(requests, w.PrefillRequests)
	}
	return loads, requests
}

func TestFirstTokenLeavesThePrefillLoad(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, DefaultConfig().Policy, urls)
	a, _, err := r.AcquireWeighted(urls[0], nil, 5)
	require.NoError(t, err)
	b, _, err := r.AcquireWeighted(urls[0], nil, 3)
	require.NoError(t, err)
	loads, requests := prefillOf(r)
	assert.Equal(t, []int64{8, 0}, loads)
	assert.Equal(t, []int64{2, 0}, requests)

	assert.True(t, r.FirstToken(a))
	assert.False(t, r.FirstToken(a), "a second mark is a no-op")
	loads, requests = prefillOf(r)
	assert.Equal(t, []int64{3, 0}, loads)
	assert.Equal(t, []int64{1, 0}, requests)
	assert.Equal(t, []int64{8, 0}, loadsOf(r), "the load still counts the lease")
	checkInvariants(t, r)

	require.True(t, r.Release(a, false))
	loads, _ = prefillOf(r)
	assert.Equal(t, []int64{3, 0}, loads, "releasing a marked lease leaves the prefill load alone")
	require.True(t, r.Release(b, false))
	loads, requests = prefillOf(r)
	assert.Equal(t, []int64{0, 0}, loads, "releasing an unmarked lease takes its weight off")
	assert.Equal(t, []int64{0, 0}, requests)
	assert.False(t, r.FirstToken(b), "a released lease")
	assert.False(t, r.FirstToken(0), "the zero lease")
	checkInvariants(t, r)
}

func TestFirstTokenOnARemovedWorker(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, prefillBounded(1.5, 2, SpillClockwise), urls) // keeps the running total
	old, _, err := r.AcquireWeighted(urls[1], nil, 4)
	require.NoError(t, err)
	require.NoError(t, r.RemoveWorker(urls[1]))
	require.NoError(t, r.AddWorker(urls[1]))
	fresh, _, err := r.AcquireWeighted(urls[1], nil, 2)
	require.NoError(t, err)
	assert.True(t, r.FirstToken(old))
	loads, _ := prefillOf(r)
	assert.Equal(t, []int64{0, 2}, loads, "the old lease never touches the new worker")
	checkInvariants(t, r)
	require.True(t, r.Release(fresh, false))
	require.True(t, r.Release(old, false))
	checkInvariants(t, r)
}

func TestFirstTokenOnAnUnhealthyWorkerKeepsTheRunningTotal(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, prefillBounded(1.5, 2, SpillClockwise), urls) // keeps the running total
	id, _, err := r.AcquireWeighted(urls[0], nil, 7)
	require.NoError(t, err)
	require.NoError(t, r.SetHealthy(urls[0], false))
	assert.True(t, r.FirstToken(id))
	checkInvariants(t, r)
	require.NoError(t, r.SetHealthy(urls[0], true))
	checkInvariants(t, r)
}

func prefillBounded(skew float64, gap int64, target SpillTarget) Policy {
	p := boundedPolicy(skew, gap)
	p.BalanceBy, p.SpillTarget = LoadPrefill, target
	return p
}

// Vectors of docs/contract.md, "Prefill load": workers w0 to w3, the key preferring w0.
func TestBoundedByPrefillLoad(t *testing.T) {
	urls := workerURLs(4)
	ref := newRefRing(urls, DefaultVirtualNodes)
	key := ref.keyWhere(t, func(order []string) bool { return order[0] == urls[0] && order[1] == urls[2] })
	cases := []struct {
		name             string
		policy           Policy
		waiting, started []int
		want             string
		branch           Branch
	}{
		// Under in_flight loads [4,0,0,0] would spill (gap 4 > 2, 4 > 1); the prefill loads are all 0.
		{"decoding is no reason to spill", prefillBounded(1.0, 2, SpillLeastLoaded), []int{0, 0, 0, 0}, []int{4, 0, 0, 0}, urls[0], BranchExplicitRoutingKeyHit},
		// Prefill [4,0,1,0]: mean 1.25, 4 > 1.25 and 4 - 0 > 2. Least prefill: w1 (in flight 2) and
		// w3 (3) tie at 0: w1, fewer in flight. In flight loads [4,2,1,3] would send it to w2.
		{"least-loaded spill by prefill, ties by leases in flight", prefillBounded(1.0, 2, SpillLeastLoaded), []int{4, 0, 1, 0}, []int{0, 2, 0, 3}, urls[1], BranchExplicitRoutingKeySpillover},
		// The same loads, clockwise w0 w2 ...: w2's prefill 1 <= 1.25.
		{"clockwise spill by prefill", prefillBounded(1.0, 2, SpillClockwise), []int{4, 0, 1, 0}, []int{0, 2, 0, 3}, urls[2], BranchExplicitRoutingKeySpillover},
		// Prefill [3,0,0,0]: 3 > 0.75, but 3 - 0 is not > 3: it stays.
		{"the gap is on the prefill load", prefillBounded(1.0, 3, SpillLeastLoaded), []int{3, 0, 0, 0}, []int{0, 0, 0, 0}, urls[0], BranchExplicitRoutingKeyHit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTestRouter(t, c.policy, urls)
			holdQueues(t, r, c.waiting, c.started)
			req := KeyRequest(key)
			d := r.Select(&req)
			assert.Equal(t, c.want, d.WorkerURL)
			assert.Equal(t, c.branch, d.Branch)
		})
	}
}

// The least prefill load skips a worker that is not spillable (contract: Worker failures).
func TestPrefillSpillSkipsSuspectWorkers(t *testing.T) {
	urls := workerURLs(4)
	ref := newRefRing(urls, DefaultVirtualNodes)
	key := ref.keyPreferring(t, urls[0])
	r := newTestRouter(t, prefillBounded(1.0, 2, SpillLeastLoaded), urls)
	holdQueues(t, r, []int{4, 1, 1, 0}, []int{0, 0, 0, 0})
	failed, _, err := r.Acquire(urls[3], nil)
	require.NoError(t, err)
	require.True(t, r.Finish(failed, OutcomeFailure, t0))
	req := KeyRequest(key)
	d := r.Select(&req)
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Contains(t, []string{urls[1], urls[2]}, d.WorkerURL, "w3 failed a request: no spill target")
}

func prefillCache(skew float64, gap int64) Policy {
	p := cachePolicy(skew, gap, 64)
	p.BalanceBy = LoadPrefill
	return p
}

func TestCacheAwareByPrefillLoad(t *testing.T) {
	urls := workerURLs(4)
	t.Run("the least prefill load among candidates", func(t *testing.T) {
		r := newTestRouter(t, prefillCache(1.0, 2), urls)
		routeTo(t, r, 1, 1, 2, 3)
		routeTo(t, r, 2, 1, 2, 3)
		// w1 decodes 3 answers (prefill 0), w2 has one prompt queued (prefill 1): mean 0.25,
		// nobody is 2 above the least, all pass. Under in_flight w1 (3 > 1, 3 - 0 > 2) fails.
		holdQueues(t, r, []int{0, 0, 1, 0}, []int{0, 3, 0, 0})
		d := r.Select(prefixRequest("", 1, 2, 3, 4))
		assert.Equal(t, urls[1], d.WorkerURL)
		assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
	})
	t.Run("equal prefill loads: the fewest leases in flight", func(t *testing.T) {
		r := newTestRouter(t, prefillCache(1.0, 2), urls)
		routeTo(t, r, 1, 1, 2, 3)
		routeTo(t, r, 2, 1, 2, 3)
		holdQueues(t, r, []int{0, 0, 0, 0}, []int{0, 2, 1, 0})
		for _, key := range []string{"", "some-key"} {
			d := r.Select(prefixRequest(key, 1, 2, 3, 4))
			assert.Equal(t, urls[2], d.WorkerURL, "key %q", key)
			assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
		}
	})
	t.Run("a prefill queue over the bound fails the test", func(t *testing.T) {
		r := newTestRouter(t, prefillCache(1.0, 2), urls)
		routeTo(t, r, 1, 1, 2, 3)
		// Prefill [0,3,0,0]: mean 0.75, 3 > 0.75 and 3 - 0 > 2: w1 is overloaded.
		holdQueues(t, r, []int{0, 3, 0, 0}, []int{1, 0, 0, 0})
		d := r.Select(prefixRequest("", 1, 2, 3))
		assert.Equal(t, BranchCacheAwareBalance, d.Branch)
		ref := newRefRing(urls, DefaultVirtualNodes)
		// w0, w2 and w3 tie at prefill 0 with 1, 0 and 0 leases (mean 1/3): w0 is above the mean.
		want := ref.firstFrom(murmurFinalizer(1), func(u string) bool { return u == urls[2] || u == urls[3] })
		assert.Equal(t, want, d.WorkerURL, "a miss: clockwise from its first unmatched block among the least prefill loads")
	})
	t.Run("a miss walks clockwise among the least prefill loads with no more leases than their mean", func(t *testing.T) {
		r := newTestRouter(t, prefillCache(1.0, 2), urls)
		ref := newRefRing(urls, DefaultVirtualNodes)
		key := ref.keyPreferring(t, urls[1])
		// Prefill [1,0,0,0]: w1, w2 and w3 tie at 0 with 2, 1 and 3 leases (mean 2): w1 and w2
		// qualify. The walk from the key meets w1; the fewest leases would take w2 for every miss.
		holdQueues(t, r, []int{1, 0, 0, 0}, []int{0, 2, 1, 3})
		d := r.Select(prefixRequest(string(key), 40, 41))
		assert.Equal(t, urls[1], d.WorkerURL)
		assert.Equal(t, BranchCacheAwareKeyHit, d.Branch)
		busy := ref.keyPreferring(t, urls[3]) // at prefill 0, but 3 leases: passed over
		want := ref.firstWhere(busy, func(u string) bool { return u == urls[1] || u == urls[2] })
		assert.Equal(t, want, r.Select(prefixRequest(string(busy), 40, 41)).WorkerURL)
		for _, b := range []uint64{40, 7, 1 << 33} {
			want := ref.firstFrom(murmurFinalizer(b), func(u string) bool { return u == urls[1] || u == urls[2] })
			assert.Equal(t, want, r.Select(prefixRequest("", b, 99)).WorkerURL, "block %d", b)
		}
	})
	t.Run("with token weights a miss may take a worker within half a mean lease of the least", func(t *testing.T) {
		ref := newRefRing(urls, DefaultVirtualNodes)
		for _, c := range []struct {
			w0       int64
			accepted []string
		}{
			// Leases held: 470 or 490 in 6, mean 78 or 81, half 39 or 40; prefill [w0,0,10,0].
			// Within the bound: w0 (30 <= 39), w1, w2, w3, leases [1,1,1,3], mean 1.5: w3 is out.
			{30, []string{urls[0], urls[1], urls[2]}},
			// w0 (50 > 40) is out; w1, w2, w3, leases [1,1,3], mean 1.67: w3 is out again.
			{50, []string{urls[1], urls[2]}},
		} {
			r := newTestRouter(t, prefillCache(1.0, 1<<20), urls)
			take := func(i int, weight int64, started bool) {
				id, _, err := r.AcquireWeighted(urls[i], nil, weight)
				require.NoError(t, err)
				if started {
					require.True(t, r.FirstToken(id))
				}
			}
			take(0, c.w0, false)
			take(1, 100, true)
			take(2, 10, false)
			for range 3 {
				take(3, 110, true)
			}
			for _, u := range urls {
				key := ref.keyPreferring(t, u)
				want := ref.firstWhere(key, func(v string) bool { return slices.Contains(c.accepted, v) })
				assert.Equal(t, want, r.Select(prefixRequest(string(key), 40, 41)).WorkerURL, "w0 waiting %d, key of %s", c.w0, u)
			}
		}
	})
	t.Run("below the threshold a key takes the least prefill load", func(t *testing.T) {
		r := newTestRouter(t, prefillCache(1.0, 2), urls)
		ref := newRefRing(urls, DefaultVirtualNodes)
		key := ref.keyPreferring(t, urls[3])
		// Prefill [1,0,1,1]: w1. In flight [2,2,2,1] (mean 1.75) the key's ring worker, w3.
		holdQueues(t, r, []int{1, 0, 1, 1}, []int{1, 2, 1, 0})
		d := r.Select(prefixRequest(string(key), 40, 41))
		assert.Equal(t, urls[1], d.WorkerURL)
		assert.Equal(t, BranchCacheAwareKeyHit, d.Branch)
		inFlight := newTestRouter(t, cachePolicy(1.0, 2, 64), urls)
		holdQueues(t, inFlight, []int{1, 0, 1, 1}, []int{1, 2, 1, 0})
		assert.Equal(t, urls[3], inFlight.Select(prefixRequest(string(key), 40, 41)).WorkerURL)
	})
}

// TestCacheAwareHitWaitFactor checks docs/contract.md, "Prefill load", rule 5, by hand: w1 holds
// [1,2,3]; a request [1,2,3,4] matches 3 of its 4 blocks there.
func TestCacheAwareHitWaitFactor(t *testing.T) {
	urls := workerURLs(4)
	ref := newRefRing(urls, DefaultVirtualNodes)
	elsewhere := func(u string) bool { return u != urls[1] }
	for _, c := range []struct {
		name    string
		factor  float64
		weight  int64 // of the request; its blocks matched weigh weight * 3 / 4
		waiting []int64
		others  int64 // one waiting lease of this weight on w0, w2 and w3 when not 0: the least
		stays   bool
	}{
		{"token weights: 600 queued is 2 x 300 matched, kept", 2, 400, []int64{600}, 0, true},
		{"token weights: 601 queued is over 2 x 300, a miss", 2, 400, []int64{601}, 0, false},
		{"the factor off (0) keeps the documented rule", 0, 400, []int64{601}, 0, true},
		{"above a least of 100: 700 queued is 600 more, kept", 2, 400, []int64{700}, 100, true},
		{"above a least of 100: 701 queued is 601 more, a miss", 2, 400, []int64{701}, 100, false},
		{"unit weights: 1 queued is under 2 x 0.75, kept", 2, 0, []int64{1}, 0, true},
		{"unit weights: 2 queued is over 2 x 0.75, a miss", 2, 0, []int64{1, 1}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := prefillCache(1.0, 1<<20)
			p.CacheAware.HitWaitFactor = c.factor
			r := newTestRouter(t, p, urls)
			routeTo(t, r, 1, 1, 2, 3)
			for _, weight := range c.waiting {
				_, _, err := r.AcquireWeighted(urls[1], nil, weight)
				require.NoError(t, err)
			}
			for i := 0; c.others > 0 && i < len(urls); i++ {
				if i != 1 {
					_, _, err := r.AcquireWeighted(urls[i], nil, c.others)
					require.NoError(t, err)
				}
			}
			for _, key := range []string{"", string(ref.keyPreferring(t, urls[2]))} {
				req := prefixRequest(key, 1, 2, 3, 4)
				req.Weight = c.weight
				d := r.Select(req)
				if c.stays {
					assert.Equal(t, urls[1], d.WorkerURL, "key %q", key)
					assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
					continue
				}
				// A miss walks from the key, else from the first unmatched block (4), among the
				// workers within half a mean lease of the least prefill load: w0, w2, w3 (with a
				// least of 100 the bound is 100 + 1001 / 4 / 2 = 225).
				want := ref.firstFrom(murmurFinalizer(4), elsewhere)
				if key != "" {
					want = ref.firstWhere([]byte(key), elsewhere)
				}
				assert.Equal(t, want, d.WorkerURL, "key %q", key)
				assert.Equal(t, BranchCacheAwareBalance, d.Branch)
			}
		})
	}
}

func TestBalanceBySetting(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"type": "cache_aware", "balance_by": "prefill", "min_load_gap": 131072, "max_load_skew": 1.0}`))
	require.NoError(t, err)
	assert.Equal(t, LoadPrefill, p.BalanceBy)
	out, err := p.MarshalJSON()
	require.NoError(t, err)
	assert.Contains(t, string(out), `"balance_by":"prefill"`)
	again, err := ParsePolicy(out)
	require.NoError(t, err)
	assert.Equal(t, p, again)

	p, err = ParsePolicy([]byte(`{"type": "bounded_consistent_hashing", "balance_by": "in_flight"}`))
	require.NoError(t, err)
	assert.Equal(t, LoadInFlight, p.BalanceBy)
	out, _ = p.MarshalJSON()
	assert.NotContains(t, string(out), "balance_by", "the default is written as before the setting existed")

	for text, want := range map[string]string{
		`{"type": "cache_aware", "balance_by": "waiting"}`: "balance_by must be one of in_flight, prefill, got \"waiting\"",
		`{"type": "cache_aware", "balance_by": null}`:      "balance_by must be one of in_flight, prefill, got null",
		`{"type": "cache_aware", "balance_by": 1}`:         "balance_by must be one of in_flight, prefill, got 1",
		`{"type": "least_load", "balance_by": "prefill"}`:  "balance_by applies only to bounded_consistent_hashing and cache_aware, not least_load",
		`{"type": "cache_aware", "Balance_by": "prefill"}`: `unknown field "Balance_by"`,
	} {
		_, err := ParsePolicy([]byte(text))
		require.ErrorIs(t, err, ErrInvalidConfig, text)
		assert.Contains(t, err.Error(), want, text)
	}
	bad := prefillBounded(1.5, 2, SpillClockwise)
	bad.BalanceBy = 9
	assert.ErrorContains(t, bad.Validate(), "balance_by must be one of in_flight, prefill, got 9")
}
