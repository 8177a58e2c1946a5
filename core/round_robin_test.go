package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func routeURLs(t *testing.T, r *Router, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		d := route(r, "k")
		require.Equal(t, BranchRoundRobin, d.Branch)
		require.Equal(t, d.WorkerURL, d.PreferredURL)
		out = append(out, d.WorkerURL)
		require.True(t, r.Release(d.Lease, false))
	}
	return out
}

func TestRoundRobinCyclesInMembershipOrder(t *testing.T) {
	urls := []string{"http://c", "http://a", "http://b"} // membership order, not sorted order
	r := newTestRouter(t, Policy{Kind: PolicyRoundRobin}, urls)
	assert.Equal(t, append(append(urls[:3:3], urls...), urls...), routeURLs(t, r, 9))
}

func TestRoundRobinSkipsUnhealthy(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, Policy{Kind: PolicyRoundRobin}, urls)
	require.NoError(t, r.SetHealthy(urls[1], false))
	got := routeURLs(t, r, 6)
	assert.Equal(t, []string{urls[0], urls[2], urls[3], urls[0], urls[2], urls[3]}, got)

	require.NoError(t, r.SetHealthy(urls[1], true))
	got = routeURLs(t, r, 8)
	counts := map[string]int{}
	for _, u := range got {
		counts[u]++
	}
	for _, u := range urls {
		assert.Equal(t, 2, counts[u], "%v", got)
	}
	// Consecutive picks follow membership order.
	for i := 1; i < len(got); i++ {
		prev := indexOf(urls, got[i-1])
		assert.Equal(t, urls[(prev+1)%len(urls)], got[i])
	}
}

func indexOf(urls []string, u string) int {
	for i, x := range urls {
		if x == u {
			return i
		}
	}
	return -1
}

func TestRoundRobinSelectDoesNotAdvance(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyRoundRobin}, urls)
	var req Request
	for i := 0; i < 5; i++ {
		d := r.Select(&req)
		assert.Equal(t, BranchRoundRobin, d.Branch)
		assert.Equal(t, urls[0], d.WorkerURL)
		assert.Zero(t, d.Lease)
	}
	d := r.Route(&req)
	assert.Equal(t, urls[0], d.WorkerURL)
	assert.Equal(t, urls[1], r.Select(&req).WorkerURL)
	assert.Equal(t, urls[1], r.Route(&req).WorkerURL)
	assert.Equal(t, urls[2], r.Select(&req).WorkerURL)
	assert.Equal(t, uint64(2), r.Stats().Branches[BranchRoundRobin], "selections are not counted")
}

func TestRoundRobinIgnoresRoutingInputs(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyRoundRobin}, urls)
	for i, req := range []Request{
		{HasTarget: true, TargetIndex: 2},
		{HasTarget: true, TargetIndex: -1},
		KeyRequest([]byte("k")),
		{ImplicitKey: []byte("i")},
	} {
		d := r.Route(&req)
		assert.Equal(t, BranchRoundRobin, d.Branch)
		assert.Equal(t, urls[i%3], d.WorkerURL)
	}
}

func TestRoundRobinNoHealthyWorkersDoesNotAdvance(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyRoundRobin}, urls)
	assert.Equal(t, urls[0], route(r, "k").WorkerURL)
	for _, u := range urls {
		require.NoError(t, r.SetHealthy(u, false))
	}
	for i := 0; i < 3; i++ {
		assert.Equal(t, BranchNoHealthyWorkers, route(r, "k").Branch)
	}
	for _, u := range urls {
		require.NoError(t, r.SetHealthy(u, true))
	}
	assert.Equal(t, urls[1], route(r, "k").WorkerURL)
}
