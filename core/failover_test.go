package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A retry is a route (contract: Worker failures, "Where a retry goes"): what a route records of
// the worker it chose, a keyed retry records of its second home. Regressions, found by a review.

// idOf is the membership ID of url.
func idOf(t *testing.T, r *Router, url string) uint32 {
	t.Helper()
	for _, w := range r.Workers() {
		if w.URL == url {
			return w.ID
		}
	}
	t.Fatalf("%s is not a member", url)
	return 0
}

// contract: "Key memory", rule 3: the worker a route chooses becomes the key's last worker,
// whatever the branch. A retry's worker was not remembered, so the key's next request went back
// to the worker that had just failed it.
func TestAFailoverBecomesTheKeysLastWorker(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, Policy{Kind: PolicyBoundedConsistentHashing, MaxLoadSkew: 1.5, MinLoadGap: 2, KeyMemory: 16}, urls)
	key := keyPreferringURL(t, urls, urls[0])
	first := r.Route(&Request{RoutingKey: key})
	require.Equal(t, urls[0], first.WorkerURL)
	require.True(t, r.Finish(first.Lease, OutcomeFailure, t0))
	retry := r.RouteAvoiding(&Request{RoutingKey: key}, []uint32{first.WorkerID})
	require.Equal(t, BranchFailover, retry.Branch)
	r.Release(retry.Lease, false)
	again := r.Route(&Request{RoutingKey: key}) // every load 0: only the memory moves it
	assert.Equal(t, retry.WorkerURL, again.WorkerURL)
	assert.Equal(t, BranchExplicitRoutingKeyRemembered, again.Branch)
	r.Release(again.Lease, false)
}

// contract: "cache_aware": after a route to w, every block of the request is in w's index, and
// the prefix counters count it. A keyed retry recorded none.
func TestAKeyedFailoverRecordsAndCountsItsBlocks(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	blocks := []uint64{11, 12, 13, 14}
	home := r.Select(&Request{RoutingKey: []byte("k0"), PrefixBlocks: blocks})
	retry := r.RouteAvoiding(&Request{RoutingKey: []byte("k0"), PrefixBlocks: blocks}, []uint32{idOf(t, r, home.WorkerURL)})
	require.Equal(t, BranchFailover, retry.Branch)
	st := r.Stats()
	assert.Equal(t, uint64(4), st.PrefixBlocks)
	assert.Equal(t, 4, st.IndexedBlocks)
	r.Release(retry.Lease, false)
	next := r.Route(&Request{PrefixBlocks: blocks}) // keyless: the index alone decides
	assert.Equal(t, retry.WorkerURL, next.WorkerURL)
	assert.Equal(t, BranchCacheAwarePrefixHit, next.Branch)
	r.Release(next.Lease, false)
}

// contract: Worker failures, "Where a retry goes": a retry refused takes no lease and counts no
// branch, its request having counted its own when first routed. Regression (found by a review):
// counting them made every proxy retry that found no untried worker left count
// no_healthy_workers (its worker was there) and a target request count target_worker_miss too.
func TestARefusedRetryCountsNoBranch(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, DefaultConfig().Policy, urls)
	all := []uint32{idOf(t, r, urls[0]), idOf(t, r, urls[1])}
	assert.Equal(t, BranchNoHealthyWorkers, r.RouteAvoiding(&Request{RoutingKey: []byte("k")}, all).Branch)
	assert.Equal(t, BranchTargetWorkerMiss, r.RouteAvoiding(&Request{HasTarget: true, TargetIndex: 1}, all[:1]).Branch)
	assert.Equal(t, [NumBranches]uint64{}, r.Stats().Branches)
}

// Regression (found by a review): under a policy that ignores X-SMG-Target-Worker (manual, as
// SMG's), a retry was refused for the header all the same.
func TestARetryIgnoresATargetItsPolicyIgnores(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyManual, MaxKeys: 16}, urls)
	req := Request{RoutingKey: []byte("k"), HasTarget: true, TargetIndex: 0}
	first := r.Route(&req)
	require.Equal(t, BranchManualVacant, first.Branch)
	require.True(t, r.Finish(first.Lease, OutcomeFailure, t0))
	retry := r.RouteAvoiding(&req, []uint32{first.WorkerID})
	assert.Equal(t, BranchFailover, retry.Branch)
	assert.NotEqual(t, first.WorkerURL, retry.WorkerURL)
	r.Release(retry.Lease, false)
}
