package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func leastLoadedPolicy(skew float64, gap int64) Policy {
	p := boundedPolicy(skew, gap)
	p.SpillTarget = SpillLeastLoaded
	return p
}

// keyInOrder returns a key whose clockwise worker order is exactly order.
func keyInOrder(t *testing.T, urls []string, order ...int) []byte {
	t.Helper()
	want := make([]string, len(order))
	for i, o := range order {
		want[i] = urls[o]
	}
	return newRefRing(urls, DefaultVirtualNodes).keyWhere(t, func(got []string) bool { return slices.Equal(got, want) })
}

// Four workers, skew 1.5, gap 2, the key's preferred worker w0 overloaded.
func TestLeastLoadedSpillVectors(t *testing.T) {
	urls := workerURLs(4)
	cases := []struct {
		loads                  []int
		order                  []int // the key's clockwise order
		clockwise, leastLoaded int
	}{
		// mean 2.5, bound 3.75: w1 is the first under the bound, w2 and w3 tie at 1.
		{[]int{6, 2, 1, 1}, []int{0, 1, 2, 3}, 1, 2},
		// The same loads from another key: the tie goes to the first of them clockwise, w3.
		{[]int{6, 2, 1, 1}, []int{0, 3, 1, 2}, 3, 3},
		{[]int{6, 2, 1, 1}, []int{0, 1, 3, 2}, 1, 3},
		// A single least loaded worker, last clockwise.
		{[]int{6, 2, 1, 0}, []int{0, 1, 2, 3}, 1, 3},
		// Every other worker ties at 0.
		{[]int{5, 0, 0, 0}, []int{0, 2, 3, 1}, 2, 2},
	}
	for _, c := range cases {
		key := keyInOrder(t, urls, c.order...)
		for policy, want := range map[SpillTarget]int{SpillClockwise: c.clockwise, SpillLeastLoaded: c.leastLoaded} {
			p := boundedPolicy(1.5, 2)
			p.SpillTarget = policy
			r, held := routerWithLoads(t, p, urls, c.loads)
			d := route(r, string(key))
			assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch, "%v %v", c.loads, policy)
			assert.Equal(t, urls[want], d.WorkerURL, "loads %v order %v, %v", c.loads, c.order, policy)
			assert.Equal(t, urls[0], d.PreferredURL)
			require.True(t, r.Release(d.Lease, false))
			releaseAll(t, r, held)
		}
	}
}

func TestLeastLoadedSpillSkipsUnavailableWorkers(t *testing.T) {
	urls := workerURLs(4)
	key := keyInOrder(t, urls, 0, 1, 2, 3)
	for target, want := range map[SpillTarget]string{SpillClockwise: urls[1], SpillLeastLoaded: urls[3]} {
		p := boundedPolicy(1.5, 2)
		p.SpillTarget = target
		r, held := routerWithLoads(t, p, urls, []int{6, 2, 0, 1})
		require.NoError(t, r.SetHealthy(urls[2], false)) // mean 3 over w0, w1, w3: bound 4.5
		d := route(r, string(key))
		assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
		assert.Equal(t, want, d.WorkerURL, target.String())
		require.True(t, r.Release(d.Lease, false))
		releaseAll(t, r, held)
	}
}

// Below a skew of 1 (Go only) even the least loaded worker can be over the bound.
func TestLeastLoadedSpillWithNoEligibleWorker(t *testing.T) {
	urls := workerURLs(3)
	ws := workersFor(urls)
	ws[0].load, ws[1].load, ws[2].load = 6, 3, 3
	v := newView()
	v.workers, v.ring = ws, buildRing(HashRingXXH64, urls, 50)
	v.available, v.spillable, v.spillableLoad = []uint32{0, 1, 2}, []uint32{0, 1, 2}, 12
	key := newRefRing(urls, 50).keyPreferring(t, urls[0])
	p := Policy{MaxLoadSkew: 0.75, SpillTarget: SpillLeastLoaded} // mean 4, bound 3: w1 and w2 tie at 3
	idx, b := selectBoundedExplicit(&v, HashRingXXH64.Position(key), &p)
	assert.Equal(t, BranchExplicitRoutingKeySpillover, b)
	assert.Equal(t, slices.Index(urls, newRefRing(urls, 50).order(key)[1]), idx)
	p.MaxLoadSkew = 0.5 // bound 2: nobody
	idx, b = selectBoundedExplicit(&v, HashRingXXH64.Position(key), &p)
	assert.Equal(t, BranchExplicitRoutingKeyNoEligibleCandidate, b)
	assert.Equal(t, 0, idx)
}

// referenceLeastLoaded is the least-loaded spill written out over the model ring: the bounded
// rule decides whether to spill, and the target is the least loaded available worker, the first
// of them in the key's clockwise order (with a skew of at least 1 it is always under the bound).
func referenceLeastLoaded(ref *refRing, key []byte, urls []string, loads []int, healthy []bool, skew float64, gap int64) (string, Branch) {
	url, branch := referenceBounded(ref, key, urls, loads, healthy, skew, gap)
	if branch != BranchExplicitRoutingKeySpillover {
		return url, branch
	}
	target, least := "", 0
	for _, u := range ref.order(key) {
		i := slices.Index(urls, u)
		if healthy[i] && (target == "" || loads[i] < least) {
			target, least = u, loads[i]
		}
	}
	return target, branch
}

func TestLeastLoadedSpillMatchesReferenceOnRandomStates(t *testing.T) {
	load := func(rng *rand.Rand) int { return rng.IntN(5) * rng.IntN(4) } // many ties
	branches := checkRandomStates(t, 43, 6, 6, load, referencePolicy{leastLoadedPolicy, referenceLeastLoaded})
	assert.Greater(t, branches[BranchExplicitRoutingKeySpillover], 100)
}

func TestSpillTargetNames(t *testing.T) {
	assert.Equal(t, "clockwise", SpillClockwise.String())
	assert.Equal(t, "least_loaded", SpillLeastLoaded.String())
	assert.Equal(t, "unknown_spill_target", SpillTarget(7).String())
}
