package core

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewRouterValidates(t *testing.T) {
	_, err := NewRouter(Config{WorkerURLs: []string{"http://a", "http://a"}, Policy: boundedPolicy(1.5, 2), VirtualNodes: 10})
	assert.ErrorIs(t, err, ErrDuplicateWorker)
	_, err = NewRouter(Config{WorkerURLs: []string{"http://a"}, Policy: boundedPolicy(0.5, 2), VirtualNodes: 10})
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewRouter(Config{WorkerURLs: []string{"http://a"}, Policy: boundedPolicy(1.5, 2)})
	assert.ErrorIs(t, err, ErrInvalidConfig, "virtual_nodes 0")

	r, err := NewRouter(DefaultConfig("http://w0:8000", "http://w1:8000"))
	require.NoError(t, err)
	assert.Equal(t, boundedPolicy(DefaultMaxLoadSkew, DefaultMinLoadGap), r.Policy())
	ws := r.Workers()
	require.Len(t, ws, 2)
	assert.Equal(t, WorkerState{URL: "http://w0:8000", ID: ws[0].ID, Healthy: true}, ws[0])
	assert.Equal(t, WorkerState{URL: "http://w1:8000", ID: ws[1].ID, Healthy: true}, ws[1])
	assert.NotZero(t, ws[0].ID)
	assert.NotEqual(t, ws[0].ID, ws[1].ID)
	checkInvariants(t, r)

	empty, err := NewRouter(DefaultConfig())
	require.NoError(t, err)
	assert.Empty(t, empty.Workers())
	assert.Equal(t, BranchNoHealthyWorkers, route(empty, "k").Branch)
}

func TestRouteCountsLoadAndDistinctKeys(t *testing.T) {
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, []string{"http://only"})
	a1, a2, b := route(r, "a"), route(r, "a"), route(r, "b")
	var none Request
	n := r.Route(&none) // no key: load only
	ws := r.Workers()
	assert.Equal(t, int64(4), ws[0].Load)
	assert.Equal(t, 2, ws[0].ActiveKeys)
	assert.Equal(t, 4, r.Stats().ActiveLeases)
	ids := []LeaseID{a1.Lease, a2.Lease, b.Lease, n.Lease}
	for i, id := range ids {
		assert.NotZero(t, id)
		for _, other := range ids[i+1:] {
			assert.NotEqual(t, id, other)
		}
	}

	assert.True(t, r.Release(a1.Lease, false))
	assert.False(t, r.Release(a1.Lease, false), "second release is a no-op")
	assert.Equal(t, WorkerState{URL: "http://only", ID: ws[0].ID, Healthy: true, Load: 3, Requests: 3, PrefillLoad: 3, PrefillRequests: 3, ActiveKeys: 2, Routed: 4, Outcomes: OutcomeCounts{OutcomeSuccess: 1}}, r.Workers()[0])
	assert.True(t, r.Release(a2.Lease, false))
	assert.Equal(t, 1, r.Workers()[0].ActiveKeys, "key a is gone, b is left")
	assert.True(t, r.Release(n.Lease, false))
	assert.Equal(t, 1, r.Workers()[0].ActiveKeys)
	assert.True(t, r.Release(b.Lease, false))
	assert.Equal(t, WorkerState{URL: "http://only", ID: ws[0].ID, Healthy: true, Routed: 4, Outcomes: OutcomeCounts{OutcomeSuccess: 4}}, r.Workers()[0])
	assert.Equal(t, 0, r.Stats().ActiveLeases)
	for _, id := range ids {
		assert.False(t, r.Release(id, false))
	}
	checkInvariants(t, r)
}

func TestReleaseOfUnknownIDsIsANoOp(t *testing.T) {
	urls := workerURLs(3)
	r, ids := routerWithLoads(t, boundedPolicy(1.5, 2), urls, []int{2, 1, 0})
	rng := rand.New(rand.NewPCG(3, 4))
	bogus := []LeaseID{0, 1, 1 << 32, ^LeaseID(0), LeaseID(uint64(2)<<32 | 0), ids[0] + 1<<32, ids[len(ids)-1] + 1}
	for i := 0; i < 100; i++ {
		bogus = append(bogus, LeaseID(rng.Uint64()))
	}
	for _, id := range bogus {
		if slices.Contains(ids, id) {
			continue
		}
		assert.False(t, r.Release(id, false), "%#x", id)
		assert.False(t, r.Release(id, true), "%#x", id)
		_, _, ok := r.LeaseWorkers(id)
		assert.False(t, ok)
	}
	assert.Equal(t, []int64{2, 1, 0}, loadsOf(r))
	assert.Equal(t, Stats{ActiveLeases: 3}, r.Stats())
	checkInvariants(t, r)
}

func TestReleaseThenRouteSeesTheRelease(t *testing.T) {
	// contract: "Reference vectors": w0 at load 3 spills; releasing one of its leases in the same step as the next
	// route brings it to 2, where the key stays on w0.
	urls := workerURLs(4)
	r, ids := routerWithLoads(t, boundedPolicy(1.5, 2), urls, []int{3, 0, 0, 0})
	req := KeyRequest(keyPreferringURL(t, urls, urls[0]))
	spilled := r.Route(&req)
	require.True(t, spilled.Spilled(), "load 3 against 0 spills")
	require.True(t, r.Release(spilled.Lease, false))

	d := r.ReleaseThenRoute(ids[0], &req)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch, "the route saw w0 at load 2")
	assert.Equal(t, urls[0], d.WorkerURL)
	assert.Equal(t, []int64{3, 0, 0, 0}, loadsOf(r), "one lease released, one taken")
	assert.False(t, r.Release(ids[0], false), "the lease was released by the combined step")
	assert.Equal(t, uint64(0), r.Stats().Leaked, "a release, not an abandoned lease")

	// A lease released already, an unknown id and no lease (0) are skipped: the route happens.
	for _, previous := range []LeaseID{ids[0], d.Lease + 1<<32, 0} {
		next := r.ReleaseThenRoute(previous, &req)
		require.NotZero(t, next.Lease, "%#x", previous)
		require.True(t, r.Release(next.Lease, false))
	}
	assert.Equal(t, []int64{3, 0, 0, 0}, loadsOf(r))
	checkInvariants(t, r)
}

func TestAbandonedReleaseCountsAsLeaked(t *testing.T) {
	r := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(2))
	a, b := route(r, "a"), route(r, "b")
	assert.True(t, r.Release(a.Lease, true))
	assert.Equal(t, uint64(1), r.Stats().Leaked)
	assert.False(t, r.Release(a.Lease, true), "already released")
	assert.Equal(t, uint64(1), r.Stats().Leaked)
	assert.True(t, r.Release(b.Lease, false))
	assert.Equal(t, uint64(1), r.Stats().Leaked)
	assert.Equal(t, 0, r.Stats().ActiveLeases)
	assert.Equal(t, []int64{0, 0}, loadsOf(r))
}

func TestStatsCountRoutedBranches(t *testing.T) {
	r := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(2))
	route(r, "a")
	route(r, "b")
	selectKey(r, "c")
	var none Request
	r.Route(&none)
	s := r.Stats()
	assert.Equal(t, uint64(2), s.Branches[BranchExplicitRoutingKeyHit])
	assert.Equal(t, uint64(1), s.Branches[BranchRandomFallback])
	var total uint64
	for _, n := range s.Branches {
		total += n
	}
	assert.Equal(t, uint64(3), total)
	assert.Equal(t, 3, s.ActiveLeases)
}

func TestLeaseWorkers(t *testing.T) {
	f := newBoundedFixture(t, 3, 1.5, 2, []int{5, 0, 0})
	d := route(f.r, string(f.key))
	require.True(t, d.Spilled())
	w, p, ok := f.r.LeaseWorkers(d.Lease)
	assert.True(t, ok)
	assert.Equal(t, d.WorkerURL, w)
	assert.Equal(t, f.urls[0], p)
	require.True(t, f.r.Release(d.Lease, false))
	_, _, ok = f.r.LeaseWorkers(d.Lease)
	assert.False(t, ok)
}

func TestAcquire(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)

	_, _, err := r.Acquire("http://nope", nil)
	assert.ErrorIs(t, err, ErrUnknownWorker)
	assert.Contains(t, err.Error(), "http://nope")

	id, st, err := r.Acquire(urls[1], []byte("k"))
	require.NoError(t, err)
	assert.NotZero(t, id)
	assert.Equal(t, urls[1], st.URL)
	assert.Equal(t, int64(1), st.Load)
	assert.Equal(t, 1, st.ActiveKeys)
	w, p, ok := r.LeaseWorkers(id)
	assert.True(t, ok)
	assert.Equal(t, urls[1], w)
	assert.Equal(t, urls[1], p)

	// An unhealthy member can be acquired; its load does not count in the available total.
	require.NoError(t, r.SetHealthy(urls[2], false))
	id2, st, err := r.Acquire(urls[2], nil)
	require.NoError(t, err)
	assert.False(t, st.Healthy)
	assert.Equal(t, int64(1), st.Load)
	assert.Equal(t, 0, st.ActiveKeys)
	checkInvariants(t, r)
	require.NoError(t, r.SetHealthy(urls[2], true))
	checkInvariants(t, r)

	assert.True(t, r.Release(id, false))
	assert.True(t, r.Release(id2, false))
	assert.Equal(t, []int64{0, 0, 0}, loadsOf(r))
	assert.Equal(t, 0, r.Workers()[1].ActiveKeys)
	checkInvariants(t, r)
}

func TestSetHealthy(t *testing.T) {
	urls := workerURLs(3)
	r, _ := routerWithLoads(t, boundedPolicy(1.5, 2), urls, []int{1, 2, 3})
	ringBefore := r.members.ring
	assert.ErrorIs(t, r.SetHealthy("http://nope", false), ErrUnknownWorker)

	require.NoError(t, r.SetHealthy(urls[1], false))
	require.NoError(t, r.SetHealthy(urls[1], false)) // idempotent
	checkInvariants(t, r)
	assert.False(t, r.Workers()[1].Healthy)
	assert.Equal(t, int64(4), r.view.spillableLoad)
	require.NoError(t, r.SetHealthy(urls[1], true))
	checkInvariants(t, r)
	assert.Equal(t, int64(6), r.view.spillableLoad)
	assert.Same(t, ringBefore, r.members.ring, "health never rebuilds the ring")

	// Loads taken and released while unhealthy keep the total right.
	require.NoError(t, r.SetHealthy(urls[0], false))
	d := route(r, "x")
	require.NotEqual(t, urls[0], d.WorkerURL)
	id, _, err := r.Acquire(urls[0], nil)
	require.NoError(t, err)
	checkInvariants(t, r)
	require.NoError(t, r.SetHealthy(urls[0], true))
	checkInvariants(t, r)
	require.True(t, r.Release(id, false))
	require.True(t, r.Release(d.Lease, false))
	checkInvariants(t, r)
	assert.Same(t, ringBefore, r.members.ring, "load never rebuilds the ring")
}

func TestAddWorker(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls[:3])
	before := map[string]string{}
	for k := 0; k < 2000; k++ {
		key := "add-" + strconv.Itoa(k)
		before[key] = selectKey(r, key).WorkerURL
	}

	assert.ErrorIs(t, r.AddWorker(urls[0]), ErrDuplicateWorker)
	assert.ErrorIs(t, r.AddWorker(""), ErrInvalidConfig)
	assert.ErrorIs(t, r.AddWorker("bad\xff"), ErrInvalidConfig)
	require.NoError(t, r.AddWorker(urls[3]))
	checkInvariants(t, r)

	ws := r.Workers()
	require.Len(t, ws, 4)
	assert.Equal(t, urls, []string{ws[0].URL, ws[1].URL, ws[2].URL, ws[3].URL})
	assert.True(t, ws[3].Healthy)
	assert.Zero(t, ws[3].Load)

	// Keys either stay or move to the new worker; the result is the ring of the whole set.
	ref := newRefRing(urls, DefaultVirtualNodes)
	moved := 0
	for key, old := range before {
		now := selectKey(r, key).WorkerURL
		require.Equal(t, ref.order([]byte(key))[0], now)
		if now != old {
			require.Equal(t, urls[3], now)
			moved++
		}
	}
	assert.InDelta(t, 500, moved, 150)
}

func TestRemoveWorker(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
	before := map[string]string{}
	for k := 0; k < 2000; k++ {
		key := "rm-" + strconv.Itoa(k)
		before[key] = selectKey(r, key).WorkerURL
	}
	assert.ErrorIs(t, r.RemoveWorker("http://nope"), ErrUnknownWorker)
	assert.True(t, r.IsMember(urls[1]))
	assert.True(t, r.IsMember(strings.ToUpper(urls[1][:7])+urls[1][7:]+"/"), "any spelling")
	require.NoError(t, r.RemoveWorker(urls[1]))
	assert.False(t, r.IsMember(urls[1]))
	assert.ErrorIs(t, r.RemoveWorker(urls[1]), ErrUnknownWorker)
	checkInvariants(t, r)
	ws := r.Workers()
	assert.Equal(t, []string{urls[0], urls[2], urls[3]}, []string{ws[0].URL, ws[1].URL, ws[2].URL})
	for key, old := range before {
		now := selectKey(r, key).WorkerURL
		require.NotEqual(t, urls[1], now)
		if old != urls[1] {
			require.Equal(t, old, now, "only the removed worker's keys move")
		}
	}
}

// Regression (found by a review): the gateway removed a worker named by its id by looking the
// id up, then removing its URL, so a worker removed and added again in between at the same URL
// was removed in its place. RemoveMember removes a worker only while it is the member named.
func TestRemoveMemberLeavesAWorkerAddedAgain(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
	old := r.Members()[1]
	require.NoError(t, r.RemoveWorker(urls[1]))
	require.NoError(t, r.AddWorker(urls[1]))
	assert.ErrorIs(t, r.RemoveMember(old), ErrUnknownWorker)
	assert.Equal(t, []string{urls[0], urls[2], urls[1]}, memberURLs(r), "the worker added again stays")
	again := r.Members()[2]
	require.NotEqual(t, old.ID, again.ID)
	require.NoError(t, r.RemoveMember(again))
	assert.Equal(t, []string{urls[0], urls[2]}, memberURLs(r))
	assert.ErrorIs(t, r.RemoveMember(again), ErrUnknownWorker)
	checkInvariants(t, r)
}

func TestReleaseAfterRemoveWorker(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	var onW1, others []LeaseID
	for i := 0; i < 3; i++ {
		id, _, err := r.Acquire(urls[1], []byte("k"+strconv.Itoa(i)))
		require.NoError(t, err)
		onW1 = append(onW1, id)
	}
	for _, u := range []string{urls[0], urls[2]} {
		id, _, err := r.Acquire(u, []byte("x"))
		require.NoError(t, err)
		others = append(others, id)
	}
	require.NoError(t, r.RemoveWorker(urls[1]))
	checkInvariants(t, r)
	assert.Equal(t, int64(2), r.view.spillableLoad)
	assert.Equal(t, 5, r.Stats().ActiveLeases)

	for _, id := range onW1 {
		w, _, ok := r.LeaseWorkers(id)
		assert.True(t, ok)
		assert.Equal(t, urls[1], w)
		assert.True(t, r.Release(id, false))
		assert.False(t, r.Release(id, false))
	}
	assert.Equal(t, []int64{1, 1}, loadsOf(r))
	assert.Equal(t, int64(2), r.view.spillableLoad)
	assert.Equal(t, 2, r.Stats().ActiveLeases)
	checkInvariants(t, r)
	releaseAll(t, r, others)
	checkInvariants(t, r)
	assert.Equal(t, 0, r.Stats().ActiveLeases)
}

func TestReleaseAfterRemoveAndReAdd(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	oldID := r.Workers()[1].ID
	var old []LeaseID
	for i := 0; i < 3; i++ {
		id, _, err := r.Acquire(urls[1], []byte("same-key"))
		require.NoError(t, err)
		old = append(old, id)
	}
	require.NoError(t, r.RemoveWorker(urls[1]))
	require.NoError(t, r.AddWorker(urls[1]))
	ws := r.Workers()
	require.Equal(t, urls[1], ws[2].URL, "re-added at the end")
	assert.NotEqual(t, oldID, ws[2].ID, "a new worker")
	assert.Zero(t, ws[2].Load)
	assert.Zero(t, ws[2].ActiveKeys)

	fresh, _, err := r.Acquire(urls[1], []byte("same-key"))
	require.NoError(t, err)
	for _, id := range old {
		assert.True(t, r.Release(id, false))
	}
	st := r.Workers()[2]
	assert.Equal(t, int64(1), st.Load, "the new worker's load is untouched")
	assert.Equal(t, 1, st.ActiveKeys, "the new worker's keys are untouched")
	checkInvariants(t, r)

	// The same through SetWorkers.
	require.NoError(t, r.SetWorkers([]string{urls[0], urls[2]}))
	require.NoError(t, r.SetWorkers(urls))
	assert.Zero(t, r.Workers()[1].Load)
	assert.True(t, r.Release(fresh, false))
	assert.Zero(t, r.Workers()[1].Load)
	assert.Equal(t, []int64{0, 0, 0}, loadsOf(r))
	checkInvariants(t, r)
	assert.Equal(t, 0, r.Stats().ActiveLeases)
}

func TestSetWorkers(t *testing.T) {
	urls := workerURLs(4)
	r, ids := routerWithLoads(t, boundedPolicy(1.5, 2), urls[:3], []int{1, 2, 3})
	require.NoError(t, r.SetHealthy(urls[1], false))
	idsBefore := map[string]uint32{}
	for _, w := range r.Workers() {
		idsBefore[w.URL] = w.ID
	}

	next := []string{urls[3], urls[2], urls[1]} // w0 leaves, w3 joins, new order
	require.NoError(t, r.SetWorkers(next))
	checkInvariants(t, r)
	ws := r.Workers()
	require.Len(t, ws, 3)
	assert.Equal(t, next, []string{ws[0].URL, ws[1].URL, ws[2].URL})
	assert.Equal(t, WorkerState{URL: urls[3], ID: ws[0].ID, Healthy: true}, ws[0])
	assert.Equal(t, WorkerState{URL: urls[2], ID: idsBefore[urls[2]], Healthy: true, Load: 3, Requests: 3, PrefillLoad: 3, PrefillRequests: 3, Routed: 3}, ws[1])
	assert.Equal(t, WorkerState{URL: urls[1], ID: idsBefore[urls[1]], Healthy: false, Load: 2, Requests: 2, PrefillLoad: 2, PrefillRequests: 2, Routed: 2, Condition: ConditionUnhealthyUser}, ws[2])
	assert.Equal(t, int64(3), r.view.spillableLoad)
	assert.Equal(t, buildRing(HashRingXXH64, next, DefaultVirtualNodes).positions, r.members.ring.positions)

	// Rejected lists leave the membership as it was.
	assert.ErrorIs(t, r.SetWorkers([]string{urls[0], urls[0]}), ErrDuplicateWorker)
	assert.ErrorIs(t, r.SetWorkers([]string{urls[0], ""}), ErrInvalidConfig)
	assert.ErrorIs(t, r.SetWorkers([]string{"\xc3("}), ErrInvalidConfig)
	assert.Equal(t, ws, r.Workers())

	// The lease on the departed w0 still releases, without touching anyone else.
	releaseAll(t, r, ids)
	assert.Equal(t, []int64{0, 0, 0}, loadsOf(r))
	checkInvariants(t, r)
	assert.Equal(t, 0, r.Stats().ActiveLeases)
}

func TestSetWorkersEmpty(t *testing.T) {
	urls := workerURLs(2)
	r, ids := routerWithLoads(t, boundedPolicy(1.5, 2), urls, []int{1, 1})
	require.NoError(t, r.SetWorkers([]string{}))
	checkInvariants(t, r)
	assert.Empty(t, r.Workers())
	for _, req := range []Request{KeyRequest([]byte("k")), {}, {HasTarget: true}, {ImplicitKey: []byte("i")}} {
		d := r.Route(&req)
		assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
		assert.Zero(t, d.Lease)
	}
	_, _, err := r.Acquire(urls[0], nil)
	assert.ErrorIs(t, err, ErrUnknownWorker)
	releaseAll(t, r, ids)
	assert.Equal(t, 0, r.Stats().ActiveLeases)

	require.NoError(t, r.SetWorkers(nil))
	require.NoError(t, r.AddWorker(urls[1]))
	assert.Equal(t, urls[1], route(r, "k").WorkerURL)
	checkInvariants(t, r)
}

func TestMembershipChangesKeepRoutingConsistentWithRebuild(t *testing.T) {
	// After any sequence of changes the router routes like a fresh router with the same set.
	rng := rand.New(rand.NewPCG(9, 9))
	all := workerURLs(8)
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, all[:4])
	for step := 0; step < 30; step++ {
		members := []string{}
		for _, w := range r.Workers() {
			members = append(members, w.URL)
		}
		switch rng.IntN(3) {
		case 0:
			u := all[rng.IntN(len(all))]
			err := r.AddWorker(u)
			if slices.Contains(members, u) {
				require.ErrorIs(t, err, ErrDuplicateWorker)
			} else {
				require.NoError(t, err)
			}
		case 1:
			if len(members) > 0 {
				require.NoError(t, r.RemoveWorker(members[rng.IntN(len(members))]))
			}
		case 2:
			perm := rng.Perm(len(all))[:1+rng.IntN(len(all))]
			next := []string{}
			for _, i := range perm {
				next = append(next, all[i])
			}
			require.NoError(t, r.SetWorkers(next))
		}
		checkInvariants(t, r)
		members = members[:0]
		for _, w := range r.Workers() {
			members = append(members, w.URL)
		}
		if len(members) == 0 {
			continue
		}
		ref := newRefRing(members, DefaultVirtualNodes)
		for k := 0; k < 50; k++ {
			key := "m-" + strconv.Itoa(k)
			require.Equal(t, ref.order([]byte(key))[0], selectKey(r, key).WorkerURL, "step %d members %v", step, members)
		}
	}
}

func TestConcurrentRoutingAndMembershipChanges(t *testing.T) {
	// The anchor is never removed nor marked unhealthy, so every route must find a worker
	// whatever the churn does; the other workers come and go.
	const anchor = "http://anchor:8000"
	all := workerURLs(6)
	r := newTestRouter(t, boundedPolicy(1.5, 1), append([]string{anchor}, all...))
	// Each churn goroutine makes at least this many changes before it honours stop, so the
	// routes always overlap real churn however the goroutines are scheduled.
	const minChurn = 50
	const routers, perRouter = 8, 4000
	stop := make(chan struct{})
	var churn sync.WaitGroup
	var flips, changes atomic.Int64

	ignore := func(err error) {
		if err != nil && !errors.Is(err, ErrUnknownWorker) && !errors.Is(err, ErrDuplicateWorker) {
			t.Errorf("unexpected error: %v", err)
		}
	}
	churn.Add(3)
	go func() { // health flips
		defer churn.Done()
		rng := rand.New(rand.NewPCG(1, 1))
		for i := 0; ; i++ {
			if i >= minChurn && stopped(stop) {
				return
			}
			ignore(r.SetHealthy(all[rng.IntN(len(all))], rng.IntN(2) == 0))
			flips.Add(1)
		}
	}()
	go func() { // membership changes
		defer churn.Done()
		rng := rand.New(rand.NewPCG(2, 2))
		for i := 0; ; i++ {
			if i >= minChurn && stopped(stop) {
				return
			}
			u := all[rng.IntN(len(all))]
			switch rng.IntN(3) {
			case 0:
				ignore(r.AddWorker(u))
			case 1:
				ignore(r.RemoveWorker(u))
			default:
				perm := rng.Perm(len(all))[:rng.IntN(len(all)+1)]
				next := []string{anchor}
				for _, p := range perm {
					next = append(next, all[p])
				}
				ignore(r.SetWorkers(next))
			}
			changes.Add(1)
		}
	}()
	go func() { // readers
		defer churn.Done()
		for !stopped(stop) {
			for _, w := range r.Workers() {
				if w.Load < 0 {
					t.Errorf("negative load on %s", w.URL)
				}
			}
			_ = r.Stats()
		}
	}()

	var workers sync.WaitGroup
	var mu sync.Mutex
	routed, released := 0, 0
	for g := 0; g < routers; g++ {
		workers.Add(1)
		go func(g int) {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			var held []LeaseID
			myRouted, myReleased := 0, 0
			for i := 0; i < perRouter; i++ {
				var d Decision
				switch rng.IntN(4) {
				case 0:
					var req Request
					d = r.Route(&req)
					assert.NotZero(t, d.Lease, "the anchor is always available")
				case 1:
					id, _, err := r.Acquire(all[rng.IntN(len(all))], []byte("acq"))
					ignore(err)
					d.Lease = id
				default:
					d = route(r, "key-"+strconv.Itoa(rng.IntN(20)))
					assert.NotZero(t, d.Lease, "the anchor is always available")
				}
				if d.Lease != 0 {
					held = append(held, d.Lease)
					myRouted++
				}
				if len(held) > 0 && rng.IntN(3) == 0 {
					j := rng.IntN(len(held))
					if r.Release(held[j], rng.IntN(10) == 0) {
						myReleased++
					}
					held = slices.Delete(held, j, j+1)
				}
			}
			for _, id := range held {
				if r.Release(id, false) {
					myReleased++
				}
			}
			mu.Lock()
			routed += myRouted
			released += myReleased
			mu.Unlock()
		}(g)
	}
	workers.Wait()
	close(stop)
	churn.Wait()

	t.Logf("%d leases, %d health flips, %d membership changes", routed, flips.Load(), changes.Load())
	assert.GreaterOrEqual(t, flips.Load(), int64(minChurn))
	assert.GreaterOrEqual(t, changes.Load(), int64(minChurn))
	assert.Equal(t, routed, released, "every lease released exactly once")
	assert.Equal(t, 0, r.Stats().ActiveLeases)
	checkInvariants(t, r)
	for _, w := range r.Workers() {
		assert.Zero(t, w.Load, w.URL)
		assert.Zero(t, w.ActiveKeys, w.URL)
	}
	require.NoError(t, r.SetWorkers(all))
	for _, u := range all {
		require.NoError(t, r.SetHealthy(u, true))
	}
	checkInvariants(t, r)
	assert.Zero(t, r.view.spillableLoad)
	for _, w := range r.Workers() {
		assert.Zero(t, w.Load, w.URL)
	}
}

func TestConcurrentRoutesAreLinearizable(t *testing.T) {
	urls := workerURLs(2)
	key := keyPreferringURL(t, urls, urls[0])
	const goroutines = 8
	for rep := 0; rep < 200; rep++ {
		r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
		start := make(chan struct{})
		var ready, done sync.WaitGroup
		decisions := make([]Decision, goroutines)
		for g := 0; g < goroutines; g++ {
			ready.Add(1)
			done.Add(1)
			go func(g int) {
				defer done.Done()
				req := KeyRequest(key)
				ready.Done()
				<-start
				decisions[g] = r.Route(&req)
			}(g)
		}
		ready.Wait()
		close(start)
		done.Wait()
		counts := map[string]int{}
		spills := 0
		for _, d := range decisions {
			require.NotZero(t, d.Lease)
			counts[d.WorkerURL]++
			if d.Spilled() {
				spills++
			}
		}
		require.Equal(t, map[string]int{urls[0]: 6, urls[1]: 2}, counts, "rep %d", rep)
		require.Equal(t, 2, spills)
		require.Equal(t, []int64{6, 2}, loadsOf(r))
		for _, d := range decisions {
			require.True(t, r.Release(d.Lease, false))
		}
		require.Equal(t, []int64{0, 0}, loadsOf(r))
	}
}

func TestRouteAllocatesNothing(t *testing.T) {
	r := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(8))
	key := keyPreferringURL(t, workerURLs(8), "http://w0:8000")
	req := KeyRequest(key)
	for i := 0; i < 100; i++ { // warm up the lease table and the key maps
		d := r.Route(&req)
		r.Release(d.Lease, false)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		d := r.Route(&req)
		r.Release(d.Lease, false)
	})
	assert.Zero(t, allocs, "Route+Release with a key")
	previous := r.Route(&req).Lease
	allocs = testing.AllocsPerRun(1000, func() { previous = r.ReleaseThenRoute(previous, &req).Lease })
	assert.Zero(t, allocs, "ReleaseThenRoute")
	r.Release(previous, false)

	// Also on the spill path, with other leases held.
	ids := holdLoads(t, r, []int{5, 0, 0, 0, 0, 0, 0, 0})
	d := r.Route(&req)
	require.True(t, d.Spilled())
	r.Release(d.Lease, false)
	allocs = testing.AllocsPerRun(1000, func() {
		d := r.Route(&req)
		r.Release(d.Lease, false)
	})
	assert.Zero(t, allocs, "Route+Release on the spill path")
	releaseAll(t, r, ids)
}

// stopped reports whether stop has been closed, without blocking.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
