package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLeastLoadPicksTheLeastLoadedAvailableWorker(t *testing.T) {
	urls := workerURLs(4)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyLeastLoad}, urls, []int{0, 4, 2, 3})
	require.NoError(t, r.SetHealthy(urls[0], false))
	d := r.Route(&Request{HasTarget: true, TargetIndex: 0, ImplicitKey: []byte("cookie")}) // inputs ignored
	assert.Equal(t, BranchLeastLoad, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	assert.Equal(t, d.WorkerURL, d.PreferredURL)
	assert.Equal(t, []int64{0, 4, 3, 3}, loadsOf(r))
}

// TestLeastLoadTiesGoClockwiseFromTheKey: among tied workers a keyed request takes the first
// clockwise from its key (docs/contract.md, "Ties by the key"), computed here by the reference ring.
func TestLeastLoadTiesGoClockwiseFromTheKey(t *testing.T) {
	urls := []string{"http://c", "http://a", "http://b", "http://d"}
	ring := newRefRing(urls, DefaultVirtualNodes)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyLeastLoad}, urls, []int{1, 0, 2, 0}) // a and d tie
	for i := 0; i < 40; i++ {
		key := []byte(fmt.Sprintf("session-%d", i))
		want := ring.firstWhere(key, func(u string) bool { return u == "http://a" || u == "http://d" })
		assert.Equal(t, want, r.Select(&Request{RoutingKey: key}).WorkerURL, "key %s", key)
	}
}

// TestLeastLoadKeylessTiesAreDrawn: without a key the router's generator picks among the tied
// workers, numbered in membership order.
func TestLeastLoadKeylessTiesAreDrawn(t *testing.T) {
	urls := workerURLs(4)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyLeastLoad}, urls, []int{0, 1, 0, 0})
	bounds := scriptedDraws(r, 2, 0, 1)
	assert.Equal(t, urls[3], r.Select(&Request{}).WorkerURL)
	assert.Equal(t, urls[0], r.Select(&Request{ImplicitKey: []byte("cookie")}).WorkerURL)
	assert.Equal(t, urls[2], r.Select(&Request{}).WorkerURL)
	assert.Equal(t, []int{3, 3, 3}, *bounds, "one draw among the 3 tied workers per request")
	_, _, err := r.Acquire(urls[0], nil)
	require.NoError(t, err)
	_, _, err = r.Acquire(urls[2], nil)
	require.NoError(t, err)
	assert.Equal(t, urls[3], r.Select(&Request{}).WorkerURL, "a lone least loaded worker draws nothing")
	assert.Len(t, *bounds, 3)
}

func TestLeastLoadComparesWeightedLoads(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	_, _, err := r.AcquireWeighted(urls[0], nil, 5)
	require.NoError(t, err)
	for i := 0; i < 4; i++ {
		assert.Equal(t, urls[1], route(r, "").WorkerURL)
	}
	assert.Equal(t, []int64{5, 4}, loadsOf(r))
}

func TestLeastLoadNoHealthyWorkers(t *testing.T) {
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, nil)
	assert.Equal(t, BranchNoHealthyWorkers, route(r, "").Branch)
}
