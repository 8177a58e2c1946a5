package core

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// routeKeys runs RouteKeys over keys and collects the decisions in order.
func routeKeys(r *Router, keys [][]byte) []Decision {
	out := make([]Decision, len(keys))
	r.RouteKeys(len(keys), func(i int) []byte { return keys[i] }, func(i int, d Decision) { out[i] = d })
	return out
}

// leaseless drops the lease IDs, which differ between routers.
func leaseless(ds []Decision) []Decision {
	out := make([]Decision, len(ds))
	for i, d := range ds {
		d.Lease = 0
		out[i] = d
	}
	return out
}

func TestRouteKeysEqualsSuccessiveRoutes(t *testing.T) {
	urls := workerURLs(4)
	// The same key repeated piles load on its worker until it spills (gap 1), an empty key
	// takes the random fallback, and other keys land where they prefer.
	hot := keyPreferringURL(t, urls, urls[0])
	keys := [][]byte{hot, hot, hot, []byte("other"), hot, hot, nil, []byte("x"), hot}
	batched := newTestRouter(t, boundedPolicy(1.5, 1), urls)
	single := newTestRouter(t, boundedPolicy(1.5, 1), urls)
	batched.view.randomIndex = func(int) int { return 2 }
	single.view.randomIndex = func(int) int { return 2 }

	got := routeKeys(batched, keys)
	var want []Decision
	for _, k := range keys {
		req := KeyRequest(k)
		want = append(want, single.Route(&req))
	}
	assert.Equal(t, leaseless(want), leaseless(got))
	branches := map[Branch]int{}
	for _, d := range got {
		branches[d.Branch]++
	}
	assert.Positive(t, branches[BranchExplicitRoutingKeySpillover], "the batch exercises a spill")
	assert.Equal(t, 1, branches[BranchRandomFallback])
	assert.Equal(t, loadsOf(single), loadsOf(batched))
	assert.Equal(t, single.Stats(), batched.Stats())
	for i, w := range batched.Workers() {
		assert.Equal(t, single.Workers()[i].ActiveKeys, w.ActiveKeys)
	}
}

func TestReleaseManyCountsWhatItReleased(t *testing.T) {
	r := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(3))
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("a"), nil}
	ds := routeKeys(r, keys)
	ids := make([]LeaseID, 0, len(ds)+3)
	for _, d := range ds {
		require.NotZero(t, d.Lease)
		ids = append(ids, d.Lease)
	}
	assert.Equal(t, 1, r.ReleaseMany(ids[:1]))
	// Released before, listed twice, never issued: each is skipped.
	ids = append(ids, ids[1], 0, LeaseID(1)<<40)
	assert.Equal(t, 3, r.ReleaseMany(ids))
	assert.Zero(t, r.Stats().ActiveLeases)
	assert.Equal(t, []int64{0, 0, 0}, loadsOf(r))
	for _, w := range r.Workers() {
		assert.Zero(t, w.ActiveKeys)
	}
	assert.Zero(t, r.Stats().Leaked, "a batch release is not a leak")
	assert.Zero(t, r.ReleaseMany(nil))
	checkInvariants(t, r)
}

func TestRouteKeysWithoutWorkers(t *testing.T) {
	r := newTestRouter(t, boundedPolicy(1.5, 2), nil)
	ds := routeKeys(r, [][]byte{[]byte("a"), []byte("b")})
	for _, d := range ds {
		assert.Equal(t, Decision{Branch: BranchNoHealthyWorkers}, d)
	}
	assert.Equal(t, uint64(2), r.Stats().Branches[BranchNoHealthyWorkers], "counted like two routes")
}

func TestBatchesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers at random; make test-go runs this test without it")
	}
	r := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(16))
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = []byte("k" + strconv.Itoa(i))
	}
	ids := make([]LeaseID, len(keys))
	allocs := testing.AllocsPerRun(100, func() {
		r.RouteKeys(len(keys), func(i int) []byte { return keys[i] }, func(i int, d Decision) { ids[i] = d.Lease })
		r.ReleaseMany(ids)
	})
	assert.Zero(t, allocs)
}

// The keys are read and hashed before the router's lock is taken (only the decisions need
// it): a key callback that reads the router's state must not wait for the batch.
func TestRouteKeysReadsTheKeysBeforeLocking(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	done := make(chan []Decision, 1)
	go func() {
		out := make([]Decision, 3)
		r.RouteKeys(3, func(i int) []byte {
			r.Workers() // takes the router's lock
			return []byte("k" + strconv.Itoa(i))
		}, func(i int, d Decision) { out[i] = d })
		done <- out
	}()
	select {
	case out := <-done:
		for _, d := range out {
			assert.NotZero(t, d.Lease)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RouteKeys called the key callback while holding the router's lock")
	}
}

// A batch is all or nothing: every key gets a lease when a worker is available, none when no
// worker is (the bindings rely on it).
func TestRouteKeysIsAllOrNothing(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	keys := [][]byte{[]byte("a"), nil, []byte("a")}
	for _, d := range routeKeys(r, keys) {
		assert.NotZero(t, d.Lease)
	}
	for _, url := range urls {
		require.NoError(t, r.SetHealthy(url, false))
	}
	for _, d := range routeKeys(r, keys) {
		assert.Zero(t, d.Lease)
		assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
	}
	assert.Equal(t, 3, r.Stats().ActiveLeases)
}

// With every option on, a weighted batch is still all or nothing, and equals successive routes.
func TestRouteWeightedKeysWithOptionsIsAllOrNothing(t *testing.T) {
	urls := workerURLs(3)
	policy := memoryPolicy(1.5, 2, 4)
	policy.SpillTarget = SpillLeastLoaded
	batched, single := newTestRouter(t, policy, urls), newTestRouter(t, policy, urls)
	keys := [][]byte{[]byte("a"), []byte("a"), []byte("d"), []byte("b"), []byte("a"), []byte("a"), []byte("c")}
	weights := []int64{5, 1, 2, 7, 3, 3, 1}
	var got []Decision
	require.NoError(t, batched.RouteWeightedKeys(len(keys), func(i int) []byte { return keys[i] },
		func(i int) int64 { return weights[i] }, func(_ int, d Decision) { got = append(got, d) }))
	for i, d := range got {
		req := Request{RoutingKey: keys[i], Weight: weights[i]}
		want := single.Route(&req)
		assert.NotZero(t, d.Lease)
		assert.Equal(t, want.Branch, d.Branch, "key %d", i)
		assert.Equal(t, want.WorkerURL, d.WorkerURL, "key %d", i)
	}
	var total int64
	for _, w := range batched.Workers() {
		total += w.Load
	}
	assert.Equal(t, int64(22), total)

	for _, url := range urls {
		require.NoError(t, batched.SetHealthy(url, false))
	}
	remembered := batched.view.memory.len()
	require.NoError(t, batched.RouteWeightedKeys(len(keys), func(i int) []byte { return keys[i] },
		func(i int) int64 { return weights[i] }, func(_ int, d Decision) {
			assert.Zero(t, d.Lease)
			assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
		}))
	assert.Equal(t, len(keys), batched.Stats().ActiveLeases)
	assert.Equal(t, remembered, batched.view.memory.len())
}

// RouteRequests equals successive routes of the same requests (headers, weights and prefix
// blocks included), and routes nothing when one request is invalid, naming its index.
func TestRouteRequestsEqualsSuccessiveRoutesAndRefusesInvalidOnes(t *testing.T) {
	urls := workerURLs(4)
	batched, single := newTestRouter(t, boundedPolicy(1.5, 2), urls), newTestRouter(t, boundedPolicy(1.5, 2), urls)
	requests := []Request{
		{RoutingKey: []byte("a"), Weight: 3},
		RequestFromHeaders(headers(HeaderRoutingKey, "b")),
		{RoutingKey: []byte("a"), PrefixBlocks: []uint64{1, 2, 3}},
		RequestFromHeaders(headers(HeaderTargetWorker, "2")),
		{ImplicitKey: []byte("Bearer x"), Weight: 5}, // no random choice: the two routers' random states differ
		{RoutingKey: []byte("a"), Weight: MaxLeaseWeight},
	}
	var got []Decision
	require.NoError(t, batched.RouteRequests(len(requests), func(i int, req *Request) error { *req = requests[i]; return nil },
		func(_ int, d Decision) { got = append(got, d) }))
	require.Len(t, got, len(requests))
	for i := range requests {
		want := single.Route(&requests[i])
		assert.Equal(t, want.Branch, got[i].Branch, "request %d", i)
		assert.Equal(t, want.WorkerURL, got[i].WorkerURL, "request %d", i)
	}
	assert.Equal(t, loadsOf(single), loadsOf(batched))

	before := loadsOf(batched)
	for _, bad := range []struct {
		req  Request
		want string
	}{
		{Request{Weight: -1}, "weight must be an integer from 1 to 1073741824, got -1 (request 1)"},
		{Request{Weight: MaxLeaseWeight + 1}, "got 1073741825 (request 1)"},
		{Request{PrefixBlocks: make([]uint64, MaxPrefixBlocks+1)}, "prefix_blocks may hold at most 65536 blocks, got 65537 (request 1)"},
	} {
		err := batched.RouteRequests(2, func(i int, req *Request) error {
			*req = Request{RoutingKey: []byte("a")}
			if i == 1 {
				*req = bad.req
			}
			return nil
		}, func(int, Decision) { t.Fatal("a batch with an invalid request routed one") })
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), bad.want)
	}
	assert.Equal(t, before, loadsOf(batched))
}
