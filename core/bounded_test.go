package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundedFixture is a bounded router over w0..w<n-1> with a key whose preferred worker is w0.
type boundedFixture struct {
	r    *Router
	urls []string
	ref  *refRing
	key  []byte
}

func newBoundedFixture(t *testing.T, n int, skew float64, gap int64, loads []int) *boundedFixture {
	t.Helper()
	urls := workerURLs(n)
	ref := newRefRing(urls, DefaultVirtualNodes)
	if loads == nil {
		loads = make([]int, n)
	}
	r, _ := routerWithLoads(t, boundedPolicy(skew, gap), urls, loads)
	return &boundedFixture{r: r, urls: urls, ref: ref, key: ref.keyPreferring(t, urls[0])}
}

// decide routes the fixture's key, checks that Select agrees with Route and that Route
// counted the request on the chosen worker, then releases the lease again.
func (f *boundedFixture) decide(t *testing.T) Decision {
	t.Helper()
	req := KeyRequest(f.key)
	selected := f.r.Select(&req)
	before := loadByURL(f.r)
	routed := f.r.Route(&req)
	require.Equal(t, selected.Branch, routed.Branch)
	require.Equal(t, selected.WorkerURL, routed.WorkerURL)
	require.Equal(t, selected.PreferredURL, routed.PreferredURL)
	require.Zero(t, selected.Lease, "Select takes no lease")
	after := loadByURL(f.r)
	if routed.WorkerURL != "" {
		require.NotZero(t, routed.Lease)
		before[routed.WorkerURL]++
		require.Equal(t, before, after)
		require.True(t, f.r.Release(routed.Lease, false))
	} else {
		require.Zero(t, routed.Lease)
		require.Equal(t, before, after)
	}
	return routed
}

// spillRef is the spill target by an independent clockwise walk: the first available worker
// whose load is at most mean*skew, over the available workers.
func spillRef(ref *refRing, key []byte, loads map[string]int64, healthy map[string]bool, skew float64) string {
	var total int64
	n := 0
	for u, l := range loads {
		if healthy == nil || healthy[u] {
			total += l
			n++
		}
	}
	bound := float64(total) / float64(n) * skew
	return ref.firstWhere(key, func(u string) bool {
		return (healthy == nil || healthy[u]) && float64(loads[u]) <= bound
	})
}

func TestBoundedReferenceVectors(t *testing.T) {
	cases := []struct {
		loads []int
		skew  float64
		gap   int64
		spill bool
	}{
		{[]int{0, 0, 0, 0}, 1.5, 2, false},
		{[]int{1, 0, 0, 0}, 1.5, 2, false},
		{[]int{2, 0, 0, 0}, 1.5, 2, false},
		{[]int{3, 0, 0, 0}, 1.5, 2, true},
		{[]int{4, 3, 3, 3}, 1.5, 0, false},
		{[]int{1, 0, 0}, 1.0, 2, false},
		{[]int{5, 0, 0}, 1.5, 2, true},
		{[]int{1, 1, 1}, 1.5, 2, false},
		{[]int{100}, 1.0, 2, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v/skew=%v/gap=%d", tc.loads, tc.skew, tc.gap), func(t *testing.T) {
			f := newBoundedFixture(t, len(tc.loads), tc.skew, tc.gap, tc.loads)
			d := f.decide(t)
			assert.Equal(t, f.urls[0], d.PreferredURL)
			if !tc.spill {
				assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
				assert.Equal(t, f.urls[0], d.WorkerURL)
				assert.False(t, d.Spilled())
				return
			}
			assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
			assert.True(t, d.Spilled())
			want := spillRef(f.ref, f.key, loadByURL(f.r), nil, tc.skew)
			assert.Equal(t, want, d.WorkerURL)
			assert.NotEqual(t, f.urls[0], d.WorkerURL)
			// Everything else is at load 0, so the target is simply the next worker clockwise.
			assert.Equal(t, f.ref.order(f.key)[1], d.WorkerURL)
		})
	}
}

func TestBoundedSpillsToTheSameTargetOnEveryRepeat(t *testing.T) {
	f := newBoundedFixture(t, 3, 1.5, 2, []int{5, 0, 0})
	first := f.decide(t)
	require.Equal(t, BranchExplicitRoutingKeySpillover, first.Branch)
	for i := 0; i < 50; i++ {
		d := f.decide(t)
		assert.Equal(t, first.WorkerURL, d.WorkerURL)
		assert.Equal(t, first.Branch, d.Branch)
	}
	// A separate router with the same inputs decides the same.
	g := newBoundedFixture(t, 3, 1.5, 2, []int{5, 0, 0})
	assert.Equal(t, first.WorkerURL, g.decide(t).WorkerURL)
}

func TestBoundedReturnsToPreferredOnceLoadsFall(t *testing.T) {
	f := newBoundedFixture(t, 3, 1.5, 2, nil)
	ids := holdLoads(t, f.r, []int{5, 0, 0})
	require.Equal(t, BranchExplicitRoutingKeySpillover, f.decide(t).Branch)
	releaseAll(t, f.r, ids[:3]) // w0 back to 2
	d := f.decide(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)
}

func TestBoundedAllUnhealthy(t *testing.T) {
	f := newBoundedFixture(t, 3, 1.5, 2, []int{1, 2, 0})
	for _, u := range f.urls {
		require.NoError(t, f.r.SetHealthy(u, false))
	}
	for _, req := range []Request{KeyRequest(f.key), {}, {HasTarget: true, TargetIndex: 0}, {ImplicitKey: []byte("a")}} {
		d := f.r.Route(&req)
		assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
		assert.Empty(t, d.WorkerURL)
		assert.Empty(t, d.PreferredURL)
		assert.Zero(t, d.Lease)
		assert.Zero(t, d.WorkerID)
	}
	assert.Equal(t, []int64{1, 2, 0}, loadsOf(f.r))
	assert.Equal(t, uint64(4), f.r.Stats().Branches[BranchNoHealthyWorkers])
}

func TestBoundedPreferredUnhealthyGoesClockwiseThenBack(t *testing.T) {
	f := newBoundedFixture(t, 4, 1.5, 2, nil)
	order := f.ref.order(f.key)
	require.Equal(t, f.urls[0], order[0])

	require.NoError(t, f.r.SetHealthy(f.urls[0], false))
	d := f.decide(t)
	assert.Equal(t, order[1], d.WorkerURL)
	assert.Equal(t, order[1], d.PreferredURL, "the preferred worker is the first available one")
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)

	// Two down: the third clockwise.
	require.NoError(t, f.r.SetHealthy(order[1], false))
	assert.Equal(t, order[2], f.decide(t).WorkerURL)

	require.NoError(t, f.r.SetHealthy(order[1], true))
	require.NoError(t, f.r.SetHealthy(f.urls[0], true))
	d = f.decide(t)
	assert.Equal(t, f.urls[0], d.WorkerURL)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
}

func TestBoundedTargetIgnoresLoad(t *testing.T) {
	f := newBoundedFixture(t, 4, 1.5, 2, []int{10, 0, 0, 0})
	req := fromHeaders("X-SMG-Target-Worker", "0", "X-SMG-Routing-Key", string(f.key))
	d := f.r.Route(&req)
	assert.Equal(t, BranchTargetWorkerHit, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)
	assert.Equal(t, f.urls[0], d.PreferredURL)
	assert.Equal(t, int64(11), loadsOf(f.r)[0])
	require.True(t, f.r.Release(d.Lease, false))

	req = fromHeaders("X-SMG-Target-Worker", "+3")
	d = f.r.Route(&req)
	assert.Equal(t, BranchTargetWorkerHit, d.Branch)
	assert.Equal(t, f.urls[3], d.WorkerURL)
	require.True(t, f.r.Release(d.Lease, false))

	// The index counts available workers only.
	require.NoError(t, f.r.SetHealthy(f.urls[0], false))
	req = fromHeaders("X-SMG-Target-Worker", "0")
	assert.Equal(t, f.urls[1], f.r.Select(&req).WorkerURL)
	req = fromHeaders("X-SMG-Target-Worker", "2")
	assert.Equal(t, f.urls[3], f.r.Select(&req).WorkerURL)
}

func TestBoundedTargetMiss(t *testing.T) {
	f := newBoundedFixture(t, 4, 1.5, 2, []int{1, 0, 0, 0})
	for _, v := range []string{"4", "99", "-1", "x", " 0", "99999999999999999999"} {
		req := fromHeaders("X-SMG-Target-Worker", v, "X-SMG-Routing-Key", string(f.key))
		d := f.r.Route(&req)
		assert.Equal(t, BranchTargetWorkerMiss, d.Branch, v)
		assert.Empty(t, d.WorkerURL, v)
		assert.Zero(t, d.Lease, v)
	}
	assert.Equal(t, []int64{1, 0, 0, 0}, loadsOf(f.r))
	assert.Equal(t, 1, f.r.Stats().ActiveLeases)
	assert.Equal(t, uint64(6), f.r.Stats().Branches[BranchTargetWorkerMiss])
}

func TestBoundedImplicitKeyNeverSpills(t *testing.T) {
	for _, header := range []string{"Authorization", "X-Forwarded-For", "Cookie"} {
		t.Run(header, func(t *testing.T) {
			f := newBoundedFixture(t, 4, 1.5, 2, []int{5, 0, 0, 0})
			// The explicit key would spill at these loads.
			require.Equal(t, BranchExplicitRoutingKeySpillover, f.decide(t).Branch)
			req := fromHeaders(header, string(f.key))
			require.Equal(t, f.key, req.ImplicitKey)
			d := f.r.Route(&req)
			assert.Equal(t, BranchImplicitRoutingKeyHit, d.Branch)
			assert.Equal(t, f.urls[0], d.WorkerURL)
			assert.Equal(t, f.urls[0], d.PreferredURL)
			assert.False(t, d.Spilled())
			assert.Equal(t, int64(6), loadsOf(f.r)[0])
			// An implicit key is not counted as an active key.
			assert.Equal(t, 0, f.r.Workers()[0].ActiveKeys)
		})
	}
}

func TestBoundedExplicitKeyFromHeaderSpills(t *testing.T) {
	f := newBoundedFixture(t, 4, 1.5, 2, []int{5, 0, 0, 0})
	req := fromHeaders("x-smg-routing-key", string(f.key), "Cookie", "ignored")
	d := f.r.Select(&req)
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Equal(t, f.ref.order(f.key)[1], d.WorkerURL)
}

func TestBoundedRandomFallback(t *testing.T) {
	f := newBoundedFixture(t, 4, 1.5, 2, []int{50, 0, 0, 0})
	require.NoError(t, f.r.SetHealthy(f.urls[2], false))
	seen := map[string]int{}
	for i := 0; i < 400; i++ {
		req := fromHeaders("Authorization", "") // present but empty: no fall-through, no key
		d := f.r.Route(&req)
		require.Equal(t, BranchRandomFallback, d.Branch)
		require.Equal(t, d.WorkerURL, d.PreferredURL)
		seen[d.WorkerURL]++
		require.True(t, f.r.Release(d.Lease, false))
	}
	assert.Zero(t, seen[f.urls[2]])
	assert.Len(t, seen, 3, "every available worker is picked, load is ignored: %v", seen)
	for _, u := range []string{f.urls[0], f.urls[1], f.urls[3]} {
		assert.Greater(t, seen[u], 60, "%s picked %d of 400 times", u, seen[u])
	}
}

func TestBoundedSequentialGap(t *testing.T) {
	for _, g := range []int64{1, 2, 4} {
		t.Run(fmt.Sprintf("gap=%d", g), func(t *testing.T) {
			f := newBoundedFixture(t, 4, 1.5, g, nil)
			var ids []LeaseID
			for i := int64(1); i <= g+1; i++ {
				d := route(f.r, string(f.key))
				require.Equal(t, f.urls[0], d.WorkerURL, "request %d", i)
				require.Equal(t, BranchExplicitRoutingKeyHit, d.Branch, "request %d", i)
				ids = append(ids, d.Lease)
			}
			d := route(f.r, string(f.key))
			ids = append(ids, d.Lease)
			require.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch, "request %d", g+2)
			require.Equal(t, f.ref.order(f.key)[1], d.WorkerURL)
			require.Equal(t, f.urls[0], d.PreferredURL)

			loads := loadsOf(f.r)
			slices.Sort(loads)
			slices.Reverse(loads)
			assert.Equal(t, []int64{g + 1, 1, 0, 0}, loads)
			assert.Equal(t, int64(g+1), loadsOf(f.r)[0])
			for _, w := range f.r.Workers() {
				if w.Load > 0 {
					assert.Equal(t, 1, w.ActiveKeys, w.URL)
				} else {
					assert.Equal(t, 0, w.ActiveKeys, w.URL)
				}
			}
			assert.Equal(t, int(g+2), f.r.Stats().ActiveLeases)

			releaseAll(t, f.r, ids)
			assert.Equal(t, []int64{0, 0, 0, 0}, loadsOf(f.r))
			for _, w := range f.r.Workers() {
				assert.Equal(t, 0, w.ActiveKeys)
			}
			assert.Equal(t, 0, f.r.Stats().ActiveLeases)
			checkInvariants(t, f.r)
		})
	}
}

// burst routes 8 siblings of one key one after another, leases held, and returns how many
// went to the preferred worker and how many elsewhere.
func burst(t *testing.T, policy Policy, preferredIndex int) (onPreferred, elsewhere int) {
	t.Helper()
	urls := workerURLs(2)
	r := newTestRouter(t, policy, urls)
	key := keyPreferringURL(t, urls, urls[preferredIndex])
	var ids []LeaseID
	for i := 0; i < 8; i++ {
		d := route(r, string(key))
		require.NotZero(t, d.Lease)
		require.Equal(t, urls[preferredIndex], d.PreferredURL)
		ids = append(ids, d.Lease)
		if d.WorkerURL == urls[preferredIndex] {
			onPreferred++
		} else {
			elsewhere++
		}
	}
	releaseAll(t, r, ids)
	assert.Equal(t, []int64{0, 0}, loadsOf(r))
	return onPreferred, elsewhere
}

func TestBoundedEightSiblingBurst(t *testing.T) {
	for gap := int64(0); gap <= 10; gap++ {
		want := [2]int{6, 2}
		switch {
		case gap >= 7:
			want = [2]int{8, 0}
		case gap >= 5:
			want = [2]int{7, 1}
		}
		for preferred := 0; preferred < 2; preferred++ {
			on, off := burst(t, boundedPolicy(1.5, gap), preferred)
			assert.Equal(t, want, [2]int{on, off}, "gap %d, preferred w%d", gap, preferred)
		}
	}
	on, off := burst(t, Policy{Kind: PolicyConsistentHashing}, 0)
	assert.Equal(t, [2]int{8, 0}, [2]int{on, off}, "strict consistent hashing")
}

func TestBoundedGapBoundaryIsStrict(t *testing.T) {
	// Relative test holds in every case below; only the absolute gap decides.
	cases := []struct {
		loads []int
		gap   int64
		spill bool
	}{
		{[]int{3, 0, 0, 0}, 3, false}, // gap exactly 3
		{[]int{3, 0, 0, 0}, 2, true},
		{[]int{5, 2, 2, 2}, 3, false}, // 5-2 == 3, min is not zero
		{[]int{5, 2, 2, 2}, 2, true},
	}
	for _, tc := range cases {
		f := newBoundedFixture(t, 4, 1.5, tc.gap, tc.loads)
		d := f.decide(t)
		assert.Equal(t, tc.spill, d.Spilled(), "%v gap %d", tc.loads, tc.gap)
	}
}

func TestBoundedSkewBoundaryIsStrict(t *testing.T) {
	// Gap 0, so only the relative test decides. Each bound is exact in binary floating point.
	cases := []struct {
		loads []int
		skew  float64
		spill bool
	}{
		{[]int{3, 1, 0, 0}, 3, false},    // mean 1, bound 3 == load
		{[]int{3, 1, 0, 0}, 2.875, true}, // bound 2.875 < 3
		{[]int{6, 2, 2, 2}, 2, false},    // mean 3, bound 6 == load
		{[]int{6, 2, 2, 2}, 1.875, true},
		{[]int{3, 1}, 1.5, false}, // mean 2, bound 3 == load
		{[]int{3, 1}, 1.25, true},
	}
	for _, tc := range cases {
		f := newBoundedFixture(t, len(tc.loads), tc.skew, 0, tc.loads)
		d := f.decide(t)
		assert.Equal(t, tc.spill, d.Spilled(), "%v skew %v", tc.loads, tc.skew)
		if !tc.spill {
			assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
		}
	}
}

// loadsInOrder returns a router over n workers whose loads, listed in the clockwise order
// of key (preferred first), are given; it also returns that order.
func loadsInOrder(t *testing.T, n int, skew float64, gap int64, clockwiseLoads []int) (*Router, []byte, []string) {
	t.Helper()
	urls := workerURLs(n)
	ref := newRefRing(urls, DefaultVirtualNodes)
	key := ref.keyPreferring(t, urls[0])
	order := ref.order(key)
	loads := make([]int, n)
	for i, u := range order {
		loads[slices.Index(urls, u)] = clockwiseLoads[i]
	}
	r, _ := routerWithLoads(t, boundedPolicy(skew, gap), urls, loads)
	return r, key, order
}

func TestBoundedSpillTargetLoadBoundIsInclusive(t *testing.T) {
	// Skew 1: the bound is the mean. Clockwise loads [6, 3, 0]: mean 3, the second worker
	// clockwise has load exactly 3 and qualifies.
	r, key, order := loadsInOrder(t, 3, 1.0, 0, []int{6, 3, 0})
	d := selectKey(r, string(key))
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Equal(t, order[1], d.WorkerURL)

	// [6, 4, 0]: mean 10/3, the second is above it, the walk continues to the third.
	r, key, order = loadsInOrder(t, 3, 1.0, 0, []int{6, 4, 0})
	d = selectKey(r, string(key))
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Equal(t, order[2], d.WorkerURL)
}

func TestBoundedSpillTargetIsFirstClockwiseNotLeastLoaded(t *testing.T) {
	// Clockwise loads [9, 1, 0, 0]: mean 2.5, bound 3.75; the second worker qualifies and wins
	// although the others are emptier.
	r, key, order := loadsInOrder(t, 4, 1.5, 2, []int{9, 1, 0, 0})
	d := selectKey(r, string(key))
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Equal(t, order[1], d.WorkerURL)
	assert.Equal(t, order[0], d.PreferredURL)
}

func TestBoundedSpillSkipsUnhealthy(t *testing.T) {
	r, key, order := loadsInOrder(t, 4, 1.5, 2, []int{6, 0, 0, 0})
	require.NoError(t, r.SetHealthy(order[1], false))
	d := selectKey(r, string(key))
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Equal(t, order[2], d.WorkerURL)
}

func TestBoundedStatisticsCountAvailableWorkersOnly(t *testing.T) {
	// An unhealthy worker's large load must not raise the mean: over the available workers
	// [3, 0, 0] the mean is 1 and w0 spills; counting the unhealthy 100 it would not.
	f := newBoundedFixture(t, 4, 1.5, 2, nil)
	order := f.ref.order(f.key)
	other := order[3]
	holdLoads(t, f.r, func() []int {
		loads := []int{3, 0, 0, 0}
		loads[slices.Index(f.urls, other)] = 100
		return loads
	}())
	require.NoError(t, f.r.SetHealthy(other, false))
	spilled := f.decide(t)
	assert.True(t, spilled.Spilled())

	// An unhealthy worker's low load must not lower the minimum: available loads are 8, 6, 6
	// (min 6, gap 2 not > 2) so w0 keeps the request at skew 1 although the mean test fires.
	g := newBoundedFixture(t, 4, 1.0, 2, nil)
	idle := g.ref.order(g.key)[1]
	loads := []int{8, 6, 6, 6}
	loads[slices.Index(g.urls, idle)] = 0
	holdLoads(t, g.r, loads)
	require.NoError(t, g.r.SetHealthy(idle, false))
	d := g.decide(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
	assert.Equal(t, g.urls[0], d.WorkerURL)
}

func TestBoundedNoEligibleCandidate(t *testing.T) {
	// Reachable only with a skew below 1, which the configuration rejects: set it directly.
	f := newBoundedFixture(t, 2, 1.5, 0, []int{4, 2})
	f.r.policy.MaxLoadSkew = 0.5 // mean 3, bound 1.5: nobody qualifies
	d := f.decide(t)
	assert.Equal(t, BranchExplicitRoutingKeyNoEligibleCandidate, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)
	assert.Equal(t, f.urls[0], d.PreferredURL)
	assert.False(t, d.Spilled())
	assert.Equal(t, uint64(1), f.r.Stats().Branches[BranchExplicitRoutingKeyNoEligibleCandidate])

	// With the same skew a worker at or under the bound is still a spill target.
	g := newBoundedFixture(t, 4, 1.5, 0, []int{10, 2, 2, 2})
	g.r.policy.MaxLoadSkew = 0.5 // mean 4, bound 2
	d = g.decide(t)
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Equal(t, g.ref.order(g.key)[1], d.WorkerURL)
}

func TestSelectBoundedExplicitOnHandBuiltView(t *testing.T) {
	urls := workerURLs(3)
	ws := workersFor(urls)
	ws[0].load, ws[1].load, ws[2].load = 6, 3, 3
	v := newView()
	v.workers, v.ring = ws, buildRing(HashRingXXH64, urls, 50)
	v.available, v.spillable, v.spillableLoad = []uint32{0, 1, 2}, []uint32{0, 1, 2}, 12
	key := newRefRing(urls, 50).keyPreferring(t, urls[0])
	pos := HashRingXXH64.Position(key)

	idx, b := selectBoundedExplicit(&v, pos, &Policy{MaxLoadSkew: 0.75, MinLoadGap: 0}) // mean 4, bound 3: w0 6 > 3, others 3 <= 3
	assert.Equal(t, BranchExplicitRoutingKeySpillover, b)
	assert.Equal(t, slices.Index(urls, newRefRing(urls, 50).order(key)[1]), idx)
	idx, b = selectBoundedExplicit(&v, pos, &Policy{MaxLoadSkew: 0.5, MinLoadGap: 0}) // bound 2: nobody
	assert.Equal(t, BranchExplicitRoutingKeyNoEligibleCandidate, b)
	assert.Equal(t, 0, idx)
	idx, b = selectBoundedExplicit(&v, pos, &Policy{MaxLoadSkew: 0.5, MinLoadGap: 3}) // gap 3 is not > 3
	assert.Equal(t, BranchExplicitRoutingKeyHit, b)
	assert.Equal(t, 0, idx)
}

// referenceBounded is docs/contract.md, "The bounded rule", written out independently over the model ring.
func referenceBounded(ref *refRing, key []byte, urls []string, loads []int, healthy []bool, skew float64, gap int64) (string, Branch) {
	load := map[string]int{}
	up := map[string]bool{}
	var total, n int
	least := -1
	for i, u := range urls {
		load[u], up[u] = loads[i], healthy[i]
		if healthy[i] {
			total += loads[i]
			n++
			if least < 0 || loads[i] < least {
				least = loads[i]
			}
		}
	}
	if n == 0 {
		return "", BranchNoHealthyWorkers
	}
	preferred := ref.firstWhere(key, func(u string) bool { return up[u] })
	mean := float64(total) / float64(n)
	if !(int64(load[preferred]-least) > gap && float64(load[preferred]) > mean*skew) {
		return preferred, BranchExplicitRoutingKeyHit
	}
	target := ref.firstWhere(key, func(u string) bool { return up[u] && float64(load[u]) <= mean*skew })
	if target == "" {
		return preferred, BranchExplicitRoutingKeyNoEligibleCandidate
	}
	return target, BranchExplicitRoutingKeySpillover
}

// referencePolicy is a policy built from a skew and a gap, and the independent rule it must
// follow: the worker and branch for a key over the given loads and health.
type referencePolicy struct {
	policy func(skew float64, gap int64) Policy
	want   func(ref *refRing, key []byte, urls []string, loads []int, healthy []bool, skew float64, gap int64) (string, Branch)
}

// checkRandomStates routes keys over 300 random states (loads from load(rng), each worker down
// with probability 1/down) and compares every decision with the reference; it returns the
// branches seen.
func checkRandomStates(t *testing.T, seed uint64, workers, down int, load func(*rand.Rand) int, p referencePolicy) map[Branch]int {
	rng := rand.New(rand.NewPCG(seed, 1))
	urls := workerURLs(workers)
	ref := newRefRing(urls, DefaultVirtualNodes)
	skews := []float64{1, 1.1, 1.25, 1.5, 2, 3}
	branches := map[Branch]int{}
	for trial := 0; trial < 300; trial++ {
		loads := make([]int, len(urls))
		healthy := make([]bool, len(urls))
		for i := range loads {
			loads[i] = load(rng)
			healthy[i] = rng.IntN(down) > 0
		}
		skew, gap := skews[rng.IntN(len(skews))], int64(rng.IntN(4))
		r, _ := routerWithLoads(t, p.policy(skew, gap), urls, loads)
		for i, h := range healthy {
			require.NoError(t, r.SetHealthy(urls[i], h))
		}
		for k := 0; k < 10; k++ {
			key := []byte("rand-" + strconv.Itoa(trial) + "-" + strconv.Itoa(k))
			wantURL, wantBranch := p.want(ref, key, urls, loads, healthy, skew, gap)
			d := selectKey(r, string(key))
			require.Equal(t, wantBranch, d.Branch, "loads %v healthy %v skew %v gap %d key %s", loads, healthy, skew, gap, key)
			require.Equal(t, wantURL, d.WorkerURL, "loads %v healthy %v skew %v gap %d key %s", loads, healthy, skew, gap, key)
			branches[d.Branch]++
		}
	}
	return branches
}

func TestBoundedMatchesReferenceOnRandomStates(t *testing.T) {
	load := func(rng *rand.Rand) int { return rng.IntN(9) }
	branches := checkRandomStates(t, 42, 5, 5, load, referencePolicy{boundedPolicy, referenceBounded})
	// The random states exercise the interesting branches.
	assert.Greater(t, branches[BranchExplicitRoutingKeyHit], 100)
	assert.Greater(t, branches[BranchExplicitRoutingKeySpillover], 100)
}

func TestDecisionPreferredDiffersOnlyOnSpill(t *testing.T) {
	f := newBoundedFixture(t, 4, 1.5, 2, []int{6, 0, 0, 0})
	w0 := f.r.Workers()[0]
	requests := map[string]Request{
		"explicit":  KeyRequest(f.key),
		"implicit":  {ImplicitKey: f.key},
		"target":    {HasTarget: true, TargetIndex: 2},
		"miss":      {HasTarget: true, TargetIndex: 9},
		"fallback":  {},
		"other key": KeyRequest([]byte("something else")),
	}
	for name, req := range requests {
		d := f.r.Route(&req)
		switch d.Branch {
		case BranchExplicitRoutingKeySpillover:
			assert.True(t, d.Spilled(), name)
			assert.NotEqual(t, d.PreferredURL, d.WorkerURL, name)
			assert.NotEqual(t, d.PreferredID, d.WorkerID, name)
		case BranchTargetWorkerMiss:
			assert.False(t, d.Spilled(), name)
			assert.Empty(t, d.WorkerURL, name)
			assert.Empty(t, d.PreferredURL, name)
		default:
			assert.False(t, d.Spilled(), name)
			assert.Equal(t, d.PreferredURL, d.WorkerURL, name)
			assert.Equal(t, d.PreferredID, d.WorkerID, name)
		}
		if name == "explicit" {
			assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
			assert.Equal(t, w0.URL, d.PreferredURL)
			assert.Equal(t, w0.ID, d.PreferredID)
			// The lease remembers both.
			got, pref, ok := f.r.LeaseWorkers(d.Lease)
			assert.True(t, ok)
			assert.Equal(t, d.WorkerURL, got)
			assert.Equal(t, w0.URL, pref)
		}
		if d.Lease != 0 {
			require.True(t, f.r.Release(d.Lease, false))
		}
	}
	for _, b := range []Branch{BranchExplicitRoutingKeyHit, BranchExplicitRoutingKeyNoEligibleCandidate, BranchTargetWorkerHit} {
		d := Decision{Branch: b}
		assert.False(t, d.Spilled(), b.String())
	}
}

func TestBranchNames(t *testing.T) {
	want := map[Branch]string{
		BranchNoHealthyWorkers:                      "no_healthy_workers",
		BranchTargetWorkerHit:                       "target_worker_hit",
		BranchTargetWorkerMiss:                      "target_worker_miss",
		BranchExplicitRoutingKeyHit:                 "explicit_routing_key_hit",
		BranchExplicitRoutingKeySpillover:           "explicit_routing_key_spillover",
		BranchExplicitRoutingKeyNoEligibleCandidate: "explicit_routing_key_no_eligible_candidate",
		BranchImplicitRoutingKeyHit:                 "implicit_routing_key_hit",
		BranchRandomFallback:                        "random_fallback",
		BranchRoutingKeyHit:                         "routing_key_hit",
		BranchRandom:                                "random",
		BranchRoundRobin:                            "round_robin",
		BranchExplicitRoutingKeyRemembered:          "explicit_routing_key_remembered",
		BranchPowerOfTwo:                            "power_of_two",
		BranchLeastLoad:                             "least_load",
		BranchManualOccupiedHit:                     "manual_occupied_hit",
		BranchManualOccupiedMiss:                    "manual_occupied_miss",
		BranchManualVacant:                          "manual_vacant",
		BranchManualNoRoutingKey:                    "manual_no_routing_key",
		BranchCacheAwarePrefixHit:                   "cache_aware_prefix_hit",
		BranchCacheAwareKeyHit:                      "cache_aware_key_hit",
		BranchCacheAwareBalance:                     "cache_aware_balance",
		BranchCacheAwareNoMatch:                     "cache_aware_no_match",
		BranchFailover:                              "failover",
	}
	require.Len(t, want, int(NumBranches))
	for b, s := range want {
		assert.Equal(t, s, b.String())
		assert.Equal(t, b != BranchNoHealthyWorkers && b != BranchTargetWorkerMiss, b.ChoseWorker(), s)
	}
	assert.Equal(t, "unknown_branch", NumBranches.String())
	assert.Equal(t, "unknown_branch", Branch(200).String())
}
