package core

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ringURLs maps a ring's owners to URLs, so rings built from differently ordered lists compare.
func ringURLs(r *ring, urls []string) []string {
	out := make([]string, len(r.owners))
	for i, o := range r.owners {
		out[i] = urls[o]
	}
	return out
}

func acceptAll(uint32) bool { return true }

func TestHashRingPositions(t *testing.T) {
	// Published XXH64 test vectors (seed 0): a wrong seed or hash would change them.
	assert.Equal(t, uint64(0xef46db3751d8e999), HashRingXXH64.Position([]byte("")))
	assert.Equal(t, uint64(0x44bc2cf5ad770999), HashRingXXH64.Position([]byte("abc")))
	for _, k := range []string{"group-17", "session-1", "\x00\xff"} {
		assert.Equal(t, xxhash.Sum64String(k), HashRingXXH64.Position([]byte(k)), k)
	}
	// SMG: the first 8 bytes, little-endian, of BLAKE3. "" and "abc" are the published BLAKE3
	// vectors (af1349b9f5f9a1a6..., 6437b3ac38465133...); the others are from the Python
	// blake3 package (the Rust implementation SMG uses).
	for data, want := range map[string]uint64{
		"":                 0xa6a1f9f5b94913af,
		"abc":              0x33514638acb33764,
		"http://w0:8000#7": 0xf2494c4b1291b60b,
		"session-1":        0x2509834e3d74020b,
	} {
		assert.Equal(t, want, HashRingSMG.Position([]byte(data)), "%q", data)
	}
	assert.Equal(t, "xxh64", HashRingXXH64.String())
	assert.Equal(t, "smg", HashRingSMG.String())
}

func TestVirtualNodePositions(t *testing.T) {
	const url = "http://w0:8000"
	for _, i := range []int{0, 1, 9, 10, 99, 149} {
		_, pos := virtualNodePosition(HashRingXXH64, nil, url, i)
		assert.Equal(t, xxhash.Sum64String(url+"#"+strconv.Itoa(i)), pos, "vnode %d", i)
	}
	_, pos := virtualNodePosition(HashRingXXH64, nil, url, 7)
	assert.Equal(t, xxhash.Sum64String("http://w0:8000#7"), pos)
	_, pos = virtualNodePosition(HashRingSMG, nil, url, 7)
	assert.Equal(t, uint64(0xf2494c4b1291b60b), pos)

	// The ring holds exactly those positions, sorted, every one owned by its worker.
	urls := workerURLs(3)
	r := buildRing(HashRingXXH64, urls, DefaultVirtualNodes)
	require.Len(t, r.positions, 3*DefaultVirtualNodes)
	require.Len(t, r.owners, 3*DefaultVirtualNodes)
	assert.True(t, slices.IsSorted(r.positions))
	for owner, u := range urls {
		for _, i := range []int{0, 1, 75, 149} {
			want := xxhash.Sum64String(u + "#" + strconv.Itoa(i))
			idx, found := slices.BinarySearch(r.positions, want)
			require.True(t, found, "%s#%d", u, i)
			assert.Equal(t, uint32(owner), r.owners[idx], "%s#%d", u, i)
		}
		// No position "#150" exists: exactly virtual_nodes entries per worker.
		_, found := slices.BinarySearch(r.positions, xxhash.Sum64String(u+"#150"))
		assert.False(t, found)
	}
	// The whole ring equals the independent model entry for entry.
	ref := newRefRing(urls, DefaultVirtualNodes)
	assert.Equal(t, ref.positions, r.positions)
	assert.Equal(t, ref.urls, ringURLs(r, urls))
}

func TestBuildRingOfFortyNodesMatchesTheModel(t *testing.T) {
	urls := workerURLs(5)
	r := buildRing(HashRingXXH64, urls, 40)
	ref := newRefRing(urls, 40)
	assert.Equal(t, ref.positions, r.positions)
	assert.Equal(t, ref.urls, ringURLs(r, urls))
	assert.Len(t, r.positions, 5*40)
}

func TestRingDependsOnlyOnTheSet(t *testing.T) {
	urls := workerURLs(8)
	base := buildRing(HashRingXXH64, urls, DefaultVirtualNodes)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 5; trial++ {
		perm := slices.Clone(urls)
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		other := buildRing(HashRingXXH64, perm, DefaultVirtualNodes)
		require.Equal(t, base.positions, other.positions)
		require.Equal(t, ringURLs(base, urls), ringURLs(other, perm))

		// Two routers with the same set in different orders route every key identically.
		ra := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
		rb := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, perm)
		for k := 0; k < 10_000; k++ {
			key := "k" + strconv.Itoa(k)
			da, db := selectKey(ra, key), selectKey(rb, key)
			if da.WorkerURL != db.WorkerURL {
				t.Fatalf("key %q: %s vs %s (order %v)", key, da.WorkerURL, db.WorkerURL, perm)
			}
		}
	}
}

func TestRingLookupMatchesModel(t *testing.T) {
	urls := workerURLs(8)
	r := buildRing(HashRingXXH64, urls, DefaultVirtualNodes)
	ref := newRefRing(urls, DefaultVirtualNodes)
	for k := 0; k < 2000; k++ {
		key := []byte("lookup-" + strconv.Itoa(k))
		got := r.first(HashRingXXH64.Position(key), acceptAll)
		require.Equal(t, ref.order(key)[0], urls[got], "key %q", key)
	}
	// A key landing exactly on a virtual node belongs to that node (first position >= key).
	for _, idx := range []int{0, 17, len(r.positions) - 1} {
		assert.Equal(t, int(r.owners[idx]), r.first(r.positions[idx], acceptAll))
		// One above goes to the next entry.
		if idx+1 < len(r.positions) && r.positions[idx]+1 < r.positions[idx+1] {
			assert.Equal(t, int(r.owners[idx+1]), r.first(r.positions[idx]+1, acceptAll))
		}
	}
}

func TestRingWrapsAround(t *testing.T) {
	urls := workerURLs(8)
	r := buildRing(HashRingXXH64, urls, DefaultVirtualNodes)
	last := r.positions[len(r.positions)-1]
	require.Less(t, last, uint64(math.MaxUint64))
	assert.Equal(t, int(r.owners[0]), r.first(math.MaxUint64, acceptAll))
	assert.Equal(t, int(r.owners[0]), r.first(last+1, acceptAll))
	assert.Equal(t, int(r.owners[0]), r.first(0, acceptAll))

	// A real key whose position lies above the last entry.
	for k := 0; ; k++ {
		require.Less(t, k, 10_000_000, "no key above the last entry found")
		key := []byte("wrap-" + strconv.Itoa(k))
		if HashRingXXH64.Position(key) > last {
			assert.Equal(t, int(r.owners[0]), r.first(HashRingXXH64.Position(key), acceptAll))
			rt := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
			assert.Equal(t, urls[r.owners[0]], selectKey(rt, string(key)).WorkerURL)
			break
		}
	}

	// The walk also wraps: rejecting the owner of the last entry from there continues at entry 0.
	lastOwner := r.owners[len(r.owners)-1]
	want := -1
	for i := range r.owners {
		if r.owners[i] != lastOwner {
			want = int(r.owners[i])
			break
		}
	}
	assert.Equal(t, want, r.first(last, func(o uint32) bool { return o != lastOwner }))
}

func TestRingFirstWalksClockwisePastRejectedOwners(t *testing.T) {
	urls := workerURLs(4)
	r := buildRing(HashRingXXH64, urls, 20)
	for _, start := range []int{0, 5, 33, len(r.positions) - 2} {
		rejected := map[uint32]bool{r.owners[start]: true}
		// Also reject the next distinct owner, so the walk has to skip two workers.
		for i := start; ; i = (i + 1) % len(r.owners) {
			if !rejected[r.owners[i]] {
				rejected[r.owners[i]] = true
				break
			}
		}
		want := -1
		for step := 0; step < len(r.owners); step++ {
			if o := r.owners[(start+step)%len(r.owners)]; !rejected[o] {
				want = int(o)
				break
			}
		}
		require.NotEqual(t, -1, want)
		got := r.first(r.positions[start], func(o uint32) bool { return !rejected[o] })
		assert.Equal(t, want, got, "start %d", start)
	}
	assert.Equal(t, -1, r.first(r.positions[3], func(uint32) bool { return false }))
	assert.Equal(t, -1, r.first(math.MaxUint64, func(uint32) bool { return false }))

	// With nothing accepted, the walk goes all the way round and sees every worker.
	seen := map[uint32]bool{}
	r.first(0, func(o uint32) bool { seen[o] = true; return false })
	assert.Len(t, seen, 4)
}

func TestEmptyRing(t *testing.T) {
	for _, r := range []*ring{{}, buildRing(HashRingXXH64, nil, DefaultVirtualNodes), emptyMembership(HashRingXXH64).ring} {
		assert.Equal(t, -1, r.first(0, acceptAll))
		assert.Equal(t, -1, r.first(12345, acceptAll))
		assert.Equal(t, -1, r.first(math.MaxUint64, acceptAll))
	}
	// Removing the only worker leaves an empty ring.
	r := buildRing(HashRingXXH64, []string{"http://w0:8000"}, 10).withoutWorker(0)
	assert.Empty(t, r.positions)
	assert.Equal(t, -1, r.first(0, acceptAll))
}

func TestSingleWorkerRingOwnsEveryKey(t *testing.T) {
	r := buildRing(HashRingXXH64, []string{"only"}, 1)
	require.Len(t, r.positions, 1)
	assert.Equal(t, xxhash.Sum64String("only#0"), r.positions[0])
	for _, pos := range []uint64{0, r.positions[0], r.positions[0] + 1, math.MaxUint64} {
		assert.Equal(t, 0, r.first(pos, acceptAll))
	}
}

func TestRingDistribution(t *testing.T) {
	urls := workerURLs(8)
	r := buildRing(HashRingXXH64, urls, DefaultVirtualNodes)
	counts := make([]int, len(urls))
	const keys = 10_000
	for k := 0; k < keys; k++ {
		counts[r.first(HashRingXXH64.Position([]byte("dist-"+strconv.Itoa(k))), acceptAll)]++
	}
	fair := float64(keys) / float64(len(urls))
	for i, c := range counts {
		assert.InDelta(t, fair, float64(c), fair*0.25, "%s got %d keys", urls[i], c)
	}
}

func TestCompareEntriesBreaksTiesByURL(t *testing.T) {
	urls := []string{"http://b", "http://a"}
	a := ringEntry{position: 7, owner: 1} // http://a
	b := ringEntry{position: 7, owner: 0} // http://b
	assert.Equal(t, -1, compareEntries(a, b, urls))
	assert.Equal(t, 1, compareEntries(b, a, urls))
	assert.Equal(t, 0, compareEntries(a, a, urls))
	assert.Equal(t, -1, compareEntries(ringEntry{position: 6, owner: 0}, a, urls))
	assert.Equal(t, 1, compareEntries(ringEntry{position: 8, owner: 1}, b, urls))
}

func workersFor(urls []string) []*worker {
	ws := make([]*worker, len(urls))
	for i, u := range urls {
		ws[i] = newWorker(u, uint32(i+1))
	}
	return ws
}

func TestIncrementalAddMatchesRebuild(t *testing.T) {
	urls := append(workerURLs(6), "http://other:1", "a", "zzz")
	for _, vnodes := range []int{1, 7, DefaultVirtualNodes} {
		for _, hash := range []HashRing{HashRingXXH64, HashRingSMG} {
			m := emptyMembership(hash)
			for i, u := range urls {
				m = m.withWorker(newWorker(u, uint32(i+1)), vnodes)
				want := buildRing(hash, urls[:i+1], vnodes)
				require.Equal(t, want, m.ring, "after adding %s (vnodes %d, %s)", u, vnodes, hash)
				require.Equal(t, urls[:i+1], m.urls)
				idx, ok := m.byURL[u]
				require.True(t, ok)
				require.Equal(t, i, idx)
			}
		}
	}
}

func TestIncrementalAddDoesNotMutateTheOldSnapshot(t *testing.T) {
	urls := workerURLs(3)
	old := rebuilt(workersFor(urls), HashRingXXH64, 10)
	positions, owners := slices.Clone(old.ring.positions), slices.Clone(old.ring.owners)
	workers := slices.Clone(old.workers)
	next := old.withWorker(newWorker("http://w3:8000", 99), 10)
	next2 := old.withWorker(newWorker("http://w4:8000", 100), 10) // branch from the same snapshot
	assert.Equal(t, positions, old.ring.positions)
	assert.Equal(t, owners, old.ring.owners)
	assert.Equal(t, workers, old.workers)
	assert.Len(t, old.workers, 3)
	assert.Equal(t, "http://w3:8000", next.workers[3].url)
	assert.Equal(t, "http://w4:8000", next2.workers[3].url)
	assert.Equal(t, []string{"http://w0:8000", "http://w1:8000", "http://w2:8000", "http://w3:8000"}, next.urls)

	// Snapshots made by withWorker may have spare capacity; branching from one must not
	// overwrite the other branch's workers or URLs.
	a := next.withWorker(newWorker("http://a", 101), 10)
	b := next.withWorker(newWorker("http://b", 102), 10)
	assert.Equal(t, "http://a", a.workers[4].url)
	assert.Equal(t, "http://a", a.urls[4])
	assert.Equal(t, "http://b", b.workers[4].url)
	assert.Equal(t, "http://b", b.urls[4])
	assert.Len(t, next.workers, 4)
	_, found := a.lookup("http://b")
	assert.False(t, found)
}

func TestIncrementalRemoveMatchesRebuild(t *testing.T) {
	urls := workerURLs(6)
	for _, vnodes := range []int{1, 7, DefaultVirtualNodes} {
		for removed := range urls {
			hash := HashRing(removed % 2) // both hashes, alternately
			m := rebuilt(workersFor(urls), hash, vnodes)
			before := slices.Clone(m.ring.positions)
			next := m.withoutWorker(removed)
			rest := slices.Delete(slices.Clone(urls), removed, removed+1)
			want := buildRing(hash, rest, vnodes)
			require.Equal(t, want, next.ring, "removing %d (%s)", removed, hash)
			require.Equal(t, rest, next.urls)
			for i, w := range next.workers {
				require.Equal(t, rest[i], w.url)
				require.Equal(t, i, next.byURL[w.url])
			}
			_, still := next.lookup(urls[removed])
			require.False(t, still)
			require.Equal(t, before, m.ring.positions, "the old snapshot is unchanged")
			require.Len(t, m.workers, len(urls))
		}
	}
}

func TestIncrementalSequenceMatchesRebuild(t *testing.T) {
	// A random sequence of adds and removes always yields the ring of the current list, placed
	// by the hash the ring started with.
	for _, hash := range []HashRing{HashRingXXH64, HashRingSMG} {
		rng := rand.New(rand.NewPCG(7, 7))
		m := emptyMembership(hash)
		next := 0
		for step := 0; step < 60; step++ {
			if len(m.workers) == 0 || rng.IntN(3) > 0 {
				u := "http://n" + strconv.Itoa(next)
				next++
				m = m.withWorker(newWorker(u, uint32(next)), 13)
			} else {
				m = m.withoutWorker(rng.IntN(len(m.workers)))
			}
			want := buildRing(hash, m.urls, 13)
			require.Equal(t, want, m.ring, "step %d (%s)", step, hash)
		}
	}
}
