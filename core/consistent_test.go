package core

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConsistentExplicitAndImplicitKeys(t *testing.T) {
	urls := workerURLs(5)
	ref := newRefRing(urls, DefaultVirtualNodes)
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
	for k := 0; k < 300; k++ {
		key := "ch-" + strconv.Itoa(k)
		want := ref.order([]byte(key))[0]

		d := route(r, key)
		require.Equal(t, BranchRoutingKeyHit, d.Branch)
		require.Equal(t, want, d.WorkerURL, key)
		require.Equal(t, want, d.PreferredURL)
		require.True(t, r.Release(d.Lease, false))

		for _, h := range []string{"Authorization", "X-Forwarded-For", "Cookie"} {
			req := fromHeaders(h, key)
			d := r.Select(&req)
			require.Equal(t, BranchRoutingKeyHit, d.Branch, h)
			require.Equal(t, want, d.WorkerURL, h)
		}
	}
}

func TestConsistentNeverSpills(t *testing.T) {
	urls := workerURLs(4)
	key := keyPreferringURL(t, urls, urls[0])
	r, _ := routerWithLoads(t, Policy{Kind: PolicyConsistentHashing}, urls, []int{100, 0, 0, 0})
	for i := 0; i < 20; i++ {
		d := route(r, string(key))
		assert.Equal(t, BranchRoutingKeyHit, d.Branch)
		assert.Equal(t, urls[0], d.WorkerURL)
		assert.False(t, d.Spilled())
	}
	assert.Equal(t, []int64{120, 0, 0, 0}, loadsOf(r))
	assert.Equal(t, 1, r.Workers()[0].ActiveKeys)
}

func TestConsistentSkipsUnhealthyPreferred(t *testing.T) {
	urls := workerURLs(4)
	ref := newRefRing(urls, DefaultVirtualNodes)
	key := ref.keyPreferring(t, urls[0])
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
	require.NoError(t, r.SetHealthy(urls[0], false))
	assert.Equal(t, ref.order(key)[1], selectKey(r, string(key)).WorkerURL)
	require.NoError(t, r.SetHealthy(urls[0], true))
	assert.Equal(t, urls[0], selectKey(r, string(key)).WorkerURL)
}

func TestConsistentTargetAndFallback(t *testing.T) {
	urls := workerURLs(3)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyConsistentHashing}, urls, []int{7, 0, 0})

	req := fromHeaders("X-SMG-Target-Worker", "0", "X-SMG-Routing-Key", "k")
	d := r.Select(&req)
	assert.Equal(t, BranchTargetWorkerHit, d.Branch)
	assert.Equal(t, urls[0], d.WorkerURL)

	req = fromHeaders("X-SMG-Target-Worker", "3")
	d = r.Route(&req)
	assert.Equal(t, BranchTargetWorkerMiss, d.Branch)
	assert.Empty(t, d.WorkerURL)
	assert.Zero(t, d.Lease)

	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		req = fromHeaders("Cookie", "\x00") // present but invalid: no key at all
		d = r.Select(&req)
		require.Equal(t, BranchRandomFallback, d.Branch)
		seen[d.WorkerURL] = true
	}
	assert.Len(t, seen, 3)

	for _, u := range urls {
		require.NoError(t, r.SetHealthy(u, false))
	}
	d = route(r, "k")
	assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
	assert.Zero(t, d.Lease)
	assert.Equal(t, []int64{7, 0, 0}, loadsOf(r))
}
