package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRandomIsUniformOverAvailableWorkers(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, Policy{Kind: PolicyRandom}, urls)
	require.NoError(t, r.SetHealthy(urls[1], false))
	counts := map[string]int{}
	const n = 6000
	for i := 0; i < n; i++ {
		// Routing inputs are ignored by this policy.
		d := route(r, "same-key")
		require.Equal(t, BranchRandom, d.Branch)
		require.Equal(t, d.WorkerURL, d.PreferredURL)
		counts[d.WorkerURL]++
		require.True(t, r.Release(d.Lease, false))
	}
	assert.Zero(t, counts[urls[1]], "an unavailable worker is never chosen")
	for _, u := range []string{urls[0], urls[2], urls[3]} {
		assert.InDelta(t, n/3, counts[u], n/3*0.15, "%s: %v", u, counts)
	}
	assert.Equal(t, uint64(n), r.Stats().Branches[BranchRandom])
}

func TestRandomUsesTheViewsRandomIndex(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyRandom}, urls)
	require.NoError(t, r.SetHealthy(urls[0], false))
	var asked []int
	r.view.randomIndex = func(n int) int { asked = append(asked, n); return n - 1 }
	req := Request{HasTarget: true, TargetIndex: 0} // ignored by random
	d := r.Select(&req)
	assert.Equal(t, BranchRandom, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	assert.Equal(t, []int{2}, asked, "drawn among the available workers only")
}

func TestRandomNoHealthyWorkers(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyRandom}, urls)
	for _, u := range urls {
		require.NoError(t, r.SetHealthy(u, false))
	}
	d := route(r, "k")
	assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
	assert.Empty(t, d.WorkerURL)
	assert.Zero(t, d.Lease)

	empty := newTestRouter(t, Policy{Kind: PolicyRandom}, nil)
	d = route(empty, "k")
	assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
}
