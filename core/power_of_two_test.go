package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptedDraws makes the view's random draws return draws in turn and records each bound.
func scriptedDraws(r *Router, draws ...int) *[]int {
	var bounds []int
	r.view.randomIndex = func(n int) int {
		bounds = append(bounds, n)
		d := draws[0]
		draws = draws[1:]
		return d
	}
	return &bounds
}

func TestPowerOfTwoPicksTheLessLoadedOfTwoDistinctDraws(t *testing.T) {
	urls := workerURLs(5)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyPowerOfTwo}, urls, []int{0, 5, 3, 9, 0})
	require.NoError(t, r.SetHealthy(urls[0], false)) // available: w1 w2 w3 w4
	cases := []struct {
		first, offset int
		want          string
	}{
		{0, 0, urls[2]}, // w1 (5) then w2 (3): the second is lighter
		{1, 0, urls[2]}, // w2 (3) then w3 (9): the first is lighter
		{3, 0, urls[4]}, // w4 (0) then, wrapping, w1 (5)
		{2, 2, urls[2]}, // w3 (9) then w2 (offset 3 wraps): w2
	}
	for _, c := range cases {
		bounds := scriptedDraws(r, c.first, c.offset)
		d := r.Select(&Request{})
		assert.Equal(t, BranchPowerOfTwo, d.Branch)
		assert.Equal(t, c.want, d.WorkerURL, "draws %d, %d", c.first, c.offset)
		assert.Equal(t, []int{4, 3}, *bounds, "first among 4 available, then an offset among the 3 others")
	}
}

func TestPowerOfTwoTieGoesToTheFirstDrawn(t *testing.T) {
	urls := workerURLs(3)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyPowerOfTwo}, urls, []int{2, 2, 2})
	for first := 0; first < 3; first++ {
		scriptedDraws(r, first, 0)
		assert.Equal(t, urls[first], r.Select(&Request{}).WorkerURL)
	}
}

func TestPowerOfTwoComparesWeightedLoads(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyPowerOfTwo}, urls)
	heavy, _, err := r.AcquireWeighted(urls[0], nil, 10)
	require.NoError(t, err)
	for i := 0; i < 3; i++ { // three light requests on w1 still weigh less than one of 10
		_, _, err := r.Acquire(urls[1], nil)
		require.NoError(t, err)
	}
	scriptedDraws(r, 0, 0)
	assert.Equal(t, urls[1], r.Select(&Request{}).WorkerURL)
	require.True(t, r.Release(heavy, false))
	scriptedDraws(r, 0, 0)
	assert.Equal(t, urls[0], r.Select(&Request{}).WorkerURL)
}

func TestPowerOfTwoIgnoresRoutingInputsAndDrawsNothingForOneWorker(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyPowerOfTwo}, urls)
	require.NoError(t, r.SetHealthy(urls[0], false))
	bounds := scriptedDraws(r)
	req := Request{HasTarget: true, TargetIndex: 0, RoutingKey: []byte("k"), ImplicitKey: []byte("i")}
	d := r.Route(&req)
	assert.Equal(t, BranchPowerOfTwo, d.Branch)
	assert.Equal(t, urls[1], d.WorkerURL)
	assert.Empty(t, *bounds)

	require.NoError(t, r.SetHealthy(urls[1], false))
	assert.Equal(t, BranchNoHealthyWorkers, r.Select(&req).Branch)
}

func TestPowerOfTwoSpreadsLoad(t *testing.T) {
	urls := workerURLs(8)
	r := newTestRouter(t, Policy{Kind: PolicyPowerOfTwo}, urls)
	for i := 0; i < 800; i++ {
		route(r, "")
	}
	loads := loadsOf(r)
	lo, hi := loads[0], loads[0]
	for _, l := range loads {
		lo, hi = min(lo, l), max(hi, l)
	}
	// Two choices keep the gap to a few requests (random alone leaves dozens at this size).
	assert.LessOrEqual(t, hi-lo, int64(12), "%v", loads)
	checkInvariants(t, r)
}
