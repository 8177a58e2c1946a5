package core

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
)

// workerURLs returns http://w0:8000 … http://w<n-1>:8000, the URLs of docs/contract.md, "Reference vectors".
func workerURLs(n int) []string {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = fmt.Sprintf("http://w%d:8000", i)
	}
	return urls
}

// headers builds the header sequence RequestFromHeaders reads from name/value pairs.
func headers(pairs ...string) iter.Seq2[[]byte, []byte] {
	if len(pairs)%2 != 0 {
		panic("headers: odd number of arguments")
	}
	return func(yield func([]byte, []byte) bool) {
		for i := 0; i < len(pairs); i += 2 {
			if !yield([]byte(pairs[i]), []byte(pairs[i+1])) {
				return
			}
		}
	}
}

func boundedPolicy(skew float64, gap int64) Policy {
	return Policy{Kind: PolicyBoundedConsistentHashing, MaxLoadSkew: skew, MinLoadGap: gap}
}

// newTestRouter builds a router with the default number of virtual nodes.
func newTestRouter(t testing.TB, policy Policy, urls []string) *Router {
	t.Helper()
	r, err := NewRouter(Config{WorkerURLs: urls, Policy: policy, VirtualNodes: DefaultVirtualNodes})
	require.NoError(t, err)
	return r
}

// refRing is an independent model of the ring of docs/contract.md ("The hash ring"), computed from xxhash directly and
// never from ring.go, so the tests can check the router against it.
type refRing struct {
	positions []uint64
	urls      []string
}

func newRefRing(urls []string, virtualNodes int) *refRing {
	type entry struct {
		pos uint64
		url string
	}
	var entries []entry
	for _, u := range urls {
		for i := 0; i < virtualNodes; i++ {
			entries = append(entries, entry{xxhash.Sum64String(u + "#" + strconv.Itoa(i)), u})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.url, b.url)
	})
	r := &refRing{}
	for _, e := range entries {
		r.positions = append(r.positions, e.pos)
		r.urls = append(r.urls, e.url)
	}
	return r
}

// order lists every worker once, clockwise from the key's position (wrapping around).
func (r *refRing) order(key []byte) []string { return r.orderFrom(xxhash.Sum64(key)) }

// orderFrom lists every worker once, clockwise from a ring position (wrapping around).
func (r *refRing) orderFrom(pos uint64) []string {
	start := len(r.positions)
	for i, p := range r.positions { // linear on purpose: independent of slices.BinarySearch
		if p >= pos {
			start = i
			break
		}
	}
	var out []string
	for step := range r.positions {
		u := r.urls[(start+step)%len(r.positions)]
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// firstWhere is the independent spill walk: the first worker clockwise from the key that
// accept admits, or "" when none does.
func (r *refRing) firstWhere(key []byte, accept func(url string) bool) string {
	for _, u := range r.order(key) {
		if accept(u) {
			return u
		}
	}
	return ""
}

// firstFrom is firstWhere from a ring position instead of a key's.
func (r *refRing) firstFrom(pos uint64, accept func(url string) bool) string {
	for _, u := range r.orderFrom(pos) {
		if accept(u) {
			return u
		}
	}
	return ""
}

// keyWhere returns the first key "key-<n>" whose clockwise worker order satisfies want.
func (r *refRing) keyWhere(t testing.TB, want func(order []string) bool) []byte {
	t.Helper()
	for n := 0; n < 1_000_000; n++ {
		key := []byte("key-" + strconv.Itoa(n))
		if want(r.order(key)) {
			return key
		}
	}
	t.Fatalf("no key found")
	return nil
}

// keyPreferring returns a key whose preferred worker (all workers healthy) is url.
func (r *refRing) keyPreferring(t testing.TB, url string) []byte {
	t.Helper()
	return r.keyWhere(t, func(order []string) bool { return order[0] == url })
}

// keyPreferringURL finds a key whose preferred worker is url among urls (default virtual nodes).
func keyPreferringURL(t testing.TB, urls []string, url string) []byte {
	t.Helper()
	return newRefRing(urls, DefaultVirtualNodes).keyPreferring(t, url)
}

// holdLoads takes loads[i] key-less leases on the i-th member and returns them.
func holdLoads(t testing.TB, r *Router, loads []int) []LeaseID {
	t.Helper()
	members := r.Workers()
	require.Len(t, members, len(loads))
	var ids []LeaseID
	for i, n := range loads {
		for j := 0; j < n; j++ {
			id, _, err := r.Acquire(members[i].URL, nil)
			require.NoError(t, err)
			ids = append(ids, id)
		}
	}
	require.Equal(t, toInt64(loads), loadsOf(r))
	return ids
}

// routerWithLoads builds a router over urls with the policy and leases held to reach loads.
func routerWithLoads(t testing.TB, policy Policy, urls []string, loads []int) (*Router, []LeaseID) {
	t.Helper()
	r := newTestRouter(t, policy, urls)
	return r, holdLoads(t, r, loads)
}

func loadsOf(r *Router) []int64 {
	var loads []int64
	for _, w := range r.Workers() {
		loads = append(loads, w.Load)
	}
	return loads
}

func loadByURL(r *Router) map[string]int64 {
	out := map[string]int64{}
	for _, w := range r.Workers() {
		out[w.URL] = w.Load
	}
	return out
}

func toInt64(xs []int) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = int64(x)
	}
	return out
}

func releaseAll(t testing.TB, r *Router, ids []LeaseID) {
	t.Helper()
	for _, id := range ids {
		require.True(t, r.Release(id, false), "lease %#x", id)
	}
}

func route(r *Router, key string) Decision {
	req := KeyRequest([]byte(key))
	return r.Route(&req)
}

func selectKey(r *Router, key string) Decision {
	req := KeyRequest([]byte(key))
	return r.Select(&req)
}

// checkInvariants verifies the router's internal bookkeeping: the available list is the
// healthy members in membership order and the running totals are the sums of the spillable
// workers' loads.
func checkInvariants(t testing.TB, r *Router) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var available []uint32
	var total, prefill int64
	for i, w := range r.members.workers {
		require.False(t, w.removed, "member %s is marked removed", w.url)
		if w.healthy {
			available = append(available, uint32(i))
		}
		if w.spillable {
			require.True(t, w.healthy, "spillable %s is unavailable", w.url)
			total += w.load
			prefill += w.prefillLoad
		}
		require.GreaterOrEqual(t, w.load, int64(0))
		require.GreaterOrEqual(t, w.prefillLoad, int64(0))
		require.True(t, 0 <= w.prefillHeld && w.prefillHeld <= w.held, "prefill load %d of %s outside 0..held %d", w.prefillHeld, w.url, w.held)
		require.True(t, 0 <= w.prefillRequests && w.prefillRequests <= w.requests, "prefill requests of %s", w.url)
	}
	require.Equal(t, len(available), len(r.view.available))
	if len(available) > 0 {
		require.Equal(t, available, r.view.available)
	}
	require.Equal(t, total, r.view.spillableLoad, "running total of spillable load")
	if !r.view.byPrefill {
		prefill = 0 // kept only for balance_by prefill
	}
	require.Equal(t, prefill, r.view.spillablePrefill, "running total of spillable prefill load")
	require.Len(t, r.view.workers, len(r.members.workers))
	require.Same(t, r.members.ring, r.view.ring)
}
