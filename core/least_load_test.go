package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLeastLoadPicksTheLeastLoadedAvailableWorker(t *testing.T) {
	urls := workerURLs(4)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyLeastLoad}, urls, []int{0, 4, 2, 3})
	require.NoError(t, r.SetHealthy(urls[0], false))
	d := r.Route(&Request{HasTarget: true, TargetIndex: 0, RoutingKey: []byte("k")}) // inputs ignored
	assert.Equal(t, BranchLeastLoad, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	assert.Equal(t, d.WorkerURL, d.PreferredURL)
	assert.Equal(t, []int64{0, 4, 3, 3}, loadsOf(r))
	// Now w2 and w3 tie at 3: the first in membership order wins, in every process.
	assert.Equal(t, urls[2], r.Select(&Request{}).WorkerURL)
}

func TestLeastLoadTiesFollowMembershipOrderNotURLs(t *testing.T) {
	urls := []string{"http://c", "http://a", "http://b"}
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	var got []string
	for i := 0; i < 6; i++ {
		got = append(got, route(r, "").WorkerURL)
	}
	assert.Equal(t, append(urls[:3:3], urls...), got, "equal loads fill in membership order")
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
