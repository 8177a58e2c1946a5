package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckWeight(t *testing.T) {
	for _, ok := range []int64{1, 2, 100_000, MaxLeaseWeight} {
		assert.NoError(t, CheckWeight(ok), ok)
	}
	for _, bad := range []int64{0, -1, MaxLeaseWeight + 1, 1 << 62} {
		err := CheckWeight(bad)
		require.ErrorIs(t, err, ErrInvalidConfig, bad)
		assert.Contains(t, err.Error(), "weight must be an integer from 1 to 1073741824", bad)
	}
}

// acquireWeighted holds one lease of weight on the member url.
func acquireWeighted(t *testing.T, r *Router, url string, weight int64) LeaseID {
	t.Helper()
	id, _, err := r.AcquireWeighted(url, nil, weight)
	require.NoError(t, err)
	return id
}

func requestsOf(r *Router) []int64 {
	var out []int64
	for _, w := range r.Workers() {
		out = append(out, w.Requests)
	}
	return out
}

// Loads and the gap are in the unit of the weights (tokens here): 4 workers, skew 1.5, gap 2048.
func TestWeightedLoadsDecideTheSpill(t *testing.T) {
	urls := workerURLs(4)
	key := keyPreferringURL(t, urls, urls[0])
	cases := []struct {
		loads []int64
		want  Branch
	}{
		{[]int64{2000, 0, 0, 0}, BranchExplicitRoutingKeyHit},          // 2000 > 1.5 * 500, but the gap 2000 is not > 2048
		{[]int64{2049, 0, 0, 0}, BranchExplicitRoutingKeySpillover},    // gap 2049 > 2048 and 2049 > 1.5 * 512.25
		{[]int64{3000, 2500, 2500, 2500}, BranchExplicitRoutingKeyHit}, // gap 500; 3000 <= 1.5 * 2625
		{[]int64{9000, 2500, 2500, 0}, BranchExplicitRoutingKeySpillover},
	}
	for _, c := range cases {
		r := newTestRouter(t, boundedPolicy(1.5, 2048), urls)
		var held []LeaseID
		for i, load := range c.loads {
			if load > 0 {
				held = append(held, acquireWeighted(t, r, urls[i], load))
			}
		}
		// One lease per loaded worker: request counts would never spill.
		d := route(r, string(key))
		assert.Equal(t, c.want, d.Branch, "loads %v", c.loads)
		require.True(t, r.Release(d.Lease, false))
		releaseAll(t, r, held)
		assert.Equal(t, []int64{0, 0, 0, 0}, loadsOf(r))
	}
}

func TestWeightedLeaseCountsItsWeightAndOneRequest(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	key := keyPreferringURL(t, urls, urls[0])
	req := Request{RoutingKey: key, Weight: 700}
	d := r.Route(&req)
	require.Equal(t, urls[0], d.WorkerURL)
	id := acquireWeighted(t, r, urls[1], 5)
	assert.Equal(t, []int64{700, 5}, loadsOf(r))
	assert.Equal(t, []int64{1, 1}, requestsOf(r))
	assert.Equal(t, 2, r.Stats().ActiveLeases)

	require.True(t, r.Release(d.Lease, false))
	require.False(t, r.Release(d.Lease, false), "a second release undoes nothing")
	assert.Equal(t, []int64{0, 5}, loadsOf(r))
	assert.Equal(t, []int64{0, 1}, requestsOf(r))
	require.True(t, r.Release(id, false))
	assert.Equal(t, []int64{0, 0}, loadsOf(r))
	assert.Equal(t, []int64{0, 0}, requestsOf(r))
}

func TestWeightedLeaseOnARemovedWorker(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	id := acquireWeighted(t, r, urls[0], 40)
	require.NoError(t, r.RemoveWorker(urls[0]))
	require.NoError(t, r.AddWorker(urls[0]))
	other := acquireWeighted(t, r, urls[0], 3)
	require.True(t, r.Release(id, false))
	assert.Equal(t, map[string]int64{urls[0]: 3, urls[1]: 0}, loadByURL(r), "the re-added worker keeps only its own lease")
	require.True(t, r.Release(other, false))
	checkInvariants(t, r)
}

func TestInvalidWeightsAreRefused(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	_, _, err := r.AcquireWeighted(urls[0], nil, 0)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "weight")

	req := Request{RoutingKey: []byte("k"), Weight: MaxLeaseWeight + 1}
	assert.PanicsWithError(t, CheckWeight(MaxLeaseWeight+1).Error(), func() { r.Route(&req) })

	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	weights := []int64{1, MaxLeaseWeight, -3}
	err = r.RouteWeightedKeys(3, func(i int) []byte { return keys[i] }, func(i int) int64 { return weights[i] },
		func(int, Decision) { t.Fatal("a batch with an invalid weight routed a key") })
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "weight must be an integer from 1 to 1073741824, got -3 (request 2)")
	assert.Equal(t, []int64{0, 0}, loadsOf(r))
	assert.Equal(t, 0, r.Stats().ActiveLeases)
}

func TestRouteWeightedKeys(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, boundedPolicy(1.5, 1_000_000), urls) // a gap nothing reaches: no spill
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	weights := []int64{10, 200, 3000, MaxLeaseWeight}
	var ids []LeaseID
	want := map[string]int64{urls[0]: 0, urls[1]: 0, urls[2]: 0}
	require.NoError(t, r.RouteWeightedKeys(4, func(i int) []byte { return keys[i] }, func(i int) int64 { return weights[i] },
		func(i int, d Decision) {
			ids = append(ids, d.Lease)
			want[d.WorkerURL] += weights[i]
		}))
	assert.Equal(t, want, loadByURL(r))
	assert.Equal(t, 4, r.ReleaseMany(ids))
	assert.Equal(t, []int64{0, 0, 0}, loadsOf(r))
}
