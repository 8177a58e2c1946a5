package core

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/contract.md, "Peer routes": the vectors below are worked by hand from its rules.

func TestPeerRouteAddsToAStandingReportUntilTheNext(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	require.NoError(t, r.PeerRoute(urls[0], 3, nil))
	assert.Equal(t, []int64{0, 0}, routingLoads(r), "no report stands: a peer route adds nothing")
	require.NoError(t, r.ReportLoad(urls[0], RequestsReport(4)))
	require.NoError(t, r.PeerRoute(urls[0], 3, nil))
	require.NoError(t, r.PeerRoute(urls[0], 0, nil)) // weight 0 counts 1
	assert.Equal(t, []int64{8, 0}, routingLoads(r), "4 reported + 3 + 1 from peers since")
	own, _, err := r.Acquire(urls[0], nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{9, 0}, routingLoads(r))
	require.NoError(t, r.ReportLoad(urls[0], RequestsReport(6)))
	assert.Equal(t, []int64{6, 0}, routingLoads(r), "the report counts every replica's requests: the peers' additions go")
	r.Release(own, false)
	require.NoError(t, r.PeerRoute(urls[0], 2, nil))
	assert.Equal(t, []int64{8, 0}, routingLoads(r))
	require.NoError(t, r.ForgetLoad(urls[0]))
	assert.Equal(t, []int64{0, 0}, routingLoads(r), "without a report: this process's leases alone")
	require.NoError(t, r.ReportLoad(urls[0], RequestsReport(1)))
	assert.Equal(t, []int64{1, 0}, routingLoads(r), "forgetting the report dropped the peers' weight too")
}

func TestPeerRouteAddsToTheReportedPrefillQueue(t *testing.T) {
	urls := workerURLs(2)
	p := Policy{Kind: PolicyLeastLoad, BalanceBy: LoadPrefill}
	r := newTestRouter(t, p, urls)
	require.NoError(t, r.ReportLoad(urls[1], EngineLoad{Requests: Unreported, Waiting: 100, WaitingRequests: Unreported}))
	require.NoError(t, r.PeerRoute(urls[1], 40, nil))
	assert.Equal(t, []int64{0, 140}, prefillLoads(r))
	assert.Equal(t, []int64{0, 0}, routingLoads(r), "the in-flight figure was not reported: unchanged")
}

func TestPeerRouteBlocksJoinTheIndex(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, cachePolicy(1.0, 8, 100), urls)
	require.NoError(t, r.PeerRoute(urls[2], 1, []uint64{11, 12, 13}))
	assert.Equal(t, []int{0, 0, 3}, indexedBlocks(r))
	d := r.Route(prefixRequest("", 11, 12, 13, 14))
	assert.Equal(t, urls[2], d.WorkerURL, "the peer's route holds the longest prefix")
	assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
	r.Release(d.Lease, false)
}

func TestPeerRouteCapsWhatAFloodingPeerAdds(t *testing.T) {
	urls := workerURLs(1)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	require.NoError(t, r.ReportLoad(urls[0], RequestsReport(MaxEngineLoad)))
	for range 1100 { // 1100 x 2^30 is past 2^40
		require.NoError(t, r.PeerRoute(urls[0], MaxLeaseWeight, nil))
	}
	assert.Equal(t, []int64{2 * MaxEngineLoad}, routingLoads(r))
}

func TestPeerRouteErrors(t *testing.T) {
	urls := workerURLs(1)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	assert.EqualError(t, r.PeerRoute(urls[0], -1, nil), "invalid configuration: weight must be an integer from 1 to 1073741824, got -1")
	assert.ErrorContains(t, r.PeerRoute(urls[0], MaxLeaseWeight+1, nil), "weight must be an integer from 1 to")
	assert.ErrorContains(t, r.PeerRoute(urls[0], 1, make([]uint64, MaxPrefixBlocks+1)), "prefix")
	assert.True(t, errors.Is(r.PeerRoute("http://127.0.0.1:9", 1, nil), ErrUnknownWorker))
	require.NoError(t, r.PeerRoute(urls[0], 1, []uint64{1}))
	assert.Equal(t, []int{0}, indexedBlocks(r), "blocks without cache_aware are ignored")
}

func TestObserveRoutesSeesEveryLease(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, cachePolicy(1.0, 8, 100), urls)
	type seen struct {
		url    string
		weight int64
		blocks []uint64
	}
	var got []seen
	r.ObserveRoutes(func(url string, weight int64, blocks []uint64) {
		got = append(got, seen{url, weight, append([]uint64(nil), blocks...)})
	})
	d := r.Route(&Request{HasTarget: true, TargetIndex: 1, PrefixBlocks: []uint64{5, 6}, Weight: 7})
	_, _, err := r.AcquireWeighted(urls[2], nil, 3)
	require.NoError(t, err)
	r.Select(prefixRequest("", 9)) // a selection takes no lease
	miss := r.Route(&Request{HasTarget: true, TargetIndex: 9})
	require.Equal(t, BranchTargetWorkerMiss, miss.Branch)
	retry := r.RouteAvoiding(&Request{RoutingKey: []byte("k"), Weight: 2}, []uint32{r.Workers()[0].ID})
	require.Equal(t, BranchFailover, retry.Branch)
	r.ObserveRoutes(nil)
	r.Route(prefixRequest("", 1))
	assert.Equal(t, []seen{{urls[1], 7, []uint64{5, 6}}, {urls[2], 3, nil}, {retry.WorkerURL, 2, nil}}, got)
	r.Release(d.Lease, false)
	r.Release(retry.Lease, false)
}
