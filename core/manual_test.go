package core

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func manualPolicy(mode AssignmentMode, maxKeys int) Policy {
	return Policy{Kind: PolicyManual, AssignmentMode: mode, MaxKeys: maxKeys}
}

func TestManualKeyKeepsItsFirstWorker(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, manualPolicy(AssignRandom, 16), urls)
	first := route(r, "session")
	assert.Equal(t, BranchManualVacant, first.Branch)
	for i := 0; i < 20; i++ {
		d := route(r, "session")
		assert.Equal(t, BranchManualOccupiedHit, d.Branch)
		assert.Equal(t, first.WorkerURL, d.WorkerURL)
	}
	// Adding workers never moves a key (unlike the ring).
	require.NoError(t, r.AddWorker("http://new:8000"))
	assert.Equal(t, first.WorkerURL, route(r, "session").WorkerURL)
}

func TestManualReassignsOnlyAfterItsWorkerFails(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, manualPolicy(AssignMinLoad, 16), urls)
	k := string(keyPreferringURL(t, urls, urls[0]))
	first := route(r, k) // both idle: min_load takes the first clockwise from the key, w0
	require.Equal(t, urls[0], first.WorkerURL)
	require.NoError(t, r.SetHealthy(urls[0], false))
	moved := route(r, k)
	assert.Equal(t, BranchManualOccupiedMiss, moved.Branch)
	assert.Equal(t, urls[1], moved.WorkerURL)
	// The first worker's return does not take the key back: it stays where it was moved.
	require.NoError(t, r.SetHealthy(urls[0], true))
	d := route(r, k)
	assert.Equal(t, BranchManualOccupiedHit, d.Branch)
	assert.Equal(t, urls[1], d.WorkerURL)
	// Removing that worker moves it again.
	require.NoError(t, r.RemoveWorker(urls[1]))
	d = route(r, k)
	assert.Equal(t, BranchManualOccupiedMiss, d.Branch)
	assert.Equal(t, urls[0], d.WorkerURL)
}

func TestManualMinLoadAssignsNewKeysToTheLeastLoaded(t *testing.T) {
	urls := workerURLs(3)
	r, _ := routerWithLoads(t, Policy{Kind: PolicyManual, AssignmentMode: AssignMinLoad, MaxKeys: 8}, urls, []int{2, 1, 1})
	a := string(newRefRing(urls, DefaultVirtualNodes).keyWhere(t, func(order []string) bool {
		return slices.Index(order, urls[2]) < slices.Index(order, urls[1])
	}))
	assert.Equal(t, urls[2], route(r, a).WorkerURL, "w1 and w2 tie: the first clockwise from the key")
	assert.Equal(t, urls[1], route(r, "b").WorkerURL)
	// A key stays on its worker whatever the loads.
	assert.Equal(t, urls[2], route(r, a).WorkerURL)
	assert.Equal(t, urls[2], route(r, a).WorkerURL)
}

func TestManualRandomAssignmentUsesTheViewsDraw(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, manualPolicy(AssignRandom, 8), urls)
	bounds := scriptedDraws(r, 2, 1)
	assert.Equal(t, urls[2], route(r, "a").WorkerURL)
	assert.Equal(t, urls[2], route(r, "a").WorkerURL, "a held key draws nothing")
	d := r.Route(&Request{})
	assert.Equal(t, BranchManualNoRoutingKey, d.Branch)
	assert.Equal(t, urls[1], d.WorkerURL)
	assert.Equal(t, []int{3, 3}, *bounds)
}

func TestManualIgnoresTargetAndImplicitKeys(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, manualPolicy(AssignMinLoad, 8), urls)
	bounds := scriptedDraws(r, 0, 0)
	req := Request{HasTarget: true, TargetIndex: 2, ImplicitKey: []byte("cookie")}
	for i := 0; i < 3; i++ {
		d := r.Route(&req)
		assert.Equal(t, BranchManualNoRoutingKey, d.Branch)
		assert.Equal(t, urls[i], d.WorkerURL, "keyless requests are assigned, min_load, never pinned")
	}
	assert.Equal(t, []int{3, 2}, *bounds, "keyless ties are drawn among the tied workers; a lone least loaded one is not")
}

func TestManualForgetsTheLeastRecentlyRoutedKeyBeyondMaxKeys(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, manualPolicy(AssignMinLoad, 2), urls)
	a, b := route(r, "a"), route(r, "b")
	route(r, "a") // a is now more recent than b
	route(r, "c") // forgets b
	assert.Equal(t, BranchManualOccupiedHit, selectKey(r, "a").Branch)
	assert.Equal(t, a.WorkerURL, selectKey(r, "a").WorkerURL)
	assert.Equal(t, BranchManualVacant, selectKey(r, "b").Branch, "b was forgotten, not %s", b.WorkerURL)
	assert.Equal(t, 2, r.view.memory.len())
}

func TestManualSelectRemembersNothing(t *testing.T) {
	r := newTestRouter(t, manualPolicy(AssignRandom, 4), workerURLs(3))
	assert.Equal(t, BranchManualVacant, selectKey(r, "k").Branch)
	assert.Equal(t, BranchManualVacant, selectKey(r, "k").Branch)
	assert.Zero(t, r.view.memory.len())
}

func TestManualRouteAllocatesNothingInSteadyState(t *testing.T) {
	r := newTestRouter(t, manualPolicy(AssignRandom, 64), workerURLs(8))
	keys := make([]Request, 256) // more keys than max_keys: evictions happen every time
	for i := range keys {
		keys[i] = KeyRequest([]byte(fmt.Sprintf("key-%d", i)))
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		d := r.Route(&keys[i%len(keys)])
		r.Release(d.Lease, false)
		i++
	})
	assert.Zero(t, allocs)
}

func TestManualSettingsAreValidated(t *testing.T) {
	for _, p := range []Policy{
		manualPolicy(AssignRandom, 0),
		manualPolicy(AssignRandom, MaxManualKeys+1),
		manualPolicy(AssignmentMode(9), 4),
	} {
		err := p.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
	p := Policy{Kind: PolicyLeastLoad, MaxKeys: 4}
	assert.ErrorContains(t, p.Validate(), "apply only to manual")
}

// TestManualContractVector is the vector of docs/contract.md, "manual".
func TestManualContractVector(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, manualPolicy(AssignMinLoad, 16), urls)
	ring := newRefRing(urls, DefaultVirtualNodes)
	a := string(ring.keyPreferring(t, urls[0]))
	b := string(ring.keyWhere(t, func(order []string) bool { return slices.Index(order, urls[1]) < slices.Index(order, urls[2]) }))
	check := func(key string, wantURL string, want Branch) {
		t.Helper()
		d := r.Route(&Request{RoutingKey: []byte(key)})
		assert.Equal(t, want, d.Branch)
		assert.Equal(t, wantURL, d.WorkerURL)
	}
	check(a, urls[0], BranchManualVacant)
	check(b, urls[1], BranchManualVacant)
	check(a, urls[0], BranchManualOccupiedHit)
	require.NoError(t, r.SetHealthy(urls[0], false))
	check(a, urls[2], BranchManualOccupiedMiss)
	require.NoError(t, r.SetHealthy(urls[0], true))
	check(a, urls[2], BranchManualOccupiedHit)
	check("", urls[1], BranchManualNoRoutingKey)
}
