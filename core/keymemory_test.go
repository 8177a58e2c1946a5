package core

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func memoryPolicy(skew float64, gap int64, keys int) Policy {
	p := boundedPolicy(skew, gap)
	p.KeyMemory = keys
	return p
}

// indexedWorkers returns workers whose membership index is their place in the list.
func indexedWorkers(n int) []*worker {
	ws := workersFor(workerURLs(n))
	for i, w := range ws {
		w.index = i
	}
	return ws
}

func TestKeyMemoryIsAnLRU(t *testing.T) {
	ws := indexedWorkers(3)
	m := newKeyMemory(2)
	m.remember(10, ws[1])
	m.remember(20, ws[2])
	assert.Equal(t, 1, m.recall(10))
	assert.Equal(t, 2, m.recall(20))
	assert.Equal(t, -1, m.recall(30))

	m.remember(10, ws[0]) // 10 is now the most recent, and on w0
	m.remember(30, ws[1]) // full: 20, the least recent, is forgotten
	assert.Equal(t, 2, m.len())
	assert.Equal(t, 0, m.recall(10))
	assert.Equal(t, -1, m.recall(20))
	assert.Equal(t, 1, m.recall(30))

	m.remember(40, ws[2]) // forgets 10
	assert.Equal(t, []int{-1, -1, 1, 2}, []int{m.recall(10), m.recall(20), m.recall(30), m.recall(40)})
	assert.Equal(t, 2, m.len())

	var none *keyMemory
	assert.Equal(t, -1, none.recall(10), "no memory recalls nothing")
}

func TestKeyMemoryForgetsAfterAnOutage(t *testing.T) {
	ws := indexedWorkers(2)
	m := newKeyMemory(4)
	m.remember(1, ws[1])
	ws[1].outages++ // what SetHealthy(false) and a removal do
	assert.Equal(t, -1, m.recall(1))
	m.remember(1, ws[1])
	assert.Equal(t, 1, m.recall(1), "remembered again after the outage")
}

// The index keeps every key reachable through evictions (backward-shift deletion), whatever
// the probe runs look like: the memory agrees with a plain model over many operations.
func TestKeyMemoryMatchesAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	ws := indexedWorkers(4)
	for _, capacity := range []int{1, 2, 3, 8, 100} {
		m := newKeyMemory(capacity)
		var order []uint64 // least recent first
		last := map[uint64]int{}
		for step := 0; step < 20_000; step++ {
			// Few distinct positions, some close together: long probe runs and many evictions.
			pos := uint64(rng.IntN(3 * capacity))
			if rng.IntN(2) == 0 {
				pos <<= 60
			}
			if rng.IntN(3) == 0 {
				want, ok := last[pos]
				if !ok {
					want = -1
				}
				require.Equal(t, want, m.recall(pos), "capacity %d step %d", capacity, step)
				continue
			}
			w := rng.IntN(len(ws))
			m.remember(pos, ws[w])
			if i := slices.Index(order, pos); i >= 0 {
				order = slices.Delete(order, i, i+1)
			} else if len(order) == capacity {
				delete(last, order[0])
				order = order[1:]
			}
			order = append(order, pos)
			last[pos] = w
			require.Equal(t, len(order), m.len())
		}
	}
}

// memoryFixture is a bounded router over w0..w3 with key memory, a key whose clockwise order is
// w0, w1, w2, w3, and a shortcut to route it.
type memoryFixture struct {
	r    *Router
	urls []string
	key  []byte
}

func newMemoryFixture(t *testing.T, keys int) *memoryFixture {
	urls := workerURLs(4)
	return &memoryFixture{r: newTestRouter(t, memoryPolicy(1.5, 2, keys), urls), urls: urls, key: keyInOrder(t, urls, 0, 1, 2, 3)}
}

// send routes the fixture's key, checks that Select agreed, and keeps the lease.
func (f *memoryFixture) send(t *testing.T) Decision {
	t.Helper()
	selected := selectKey(f.r, string(f.key))
	d := route(f.r, string(f.key))
	require.Equal(t, selected.Branch, d.Branch)
	require.Equal(t, selected.WorkerURL, d.WorkerURL)
	return d
}

// hold takes loads[i] key-less leases on w<i>, on top of whatever is held already.
func (f *memoryFixture) hold(t *testing.T, loads ...int) []LeaseID {
	t.Helper()
	var ids []LeaseID
	for i, n := range loads {
		for range n {
			id, _, err := f.r.Acquire(f.urls[i], nil)
			require.NoError(t, err)
			ids = append(ids, id)
		}
	}
	return ids
}

// spillToW1 makes the key spill from w0 to w1 (loads [3,0,0,0], skew 1.5, gap 2), then drops
// the load on w0 again: the key's request stays in flight on w1.
func (f *memoryFixture) spillToW1(t *testing.T) Decision {
	t.Helper()
	held := f.hold(t, 3, 0, 0, 0)
	d := f.send(t)
	require.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	require.Equal(t, f.urls[1], d.WorkerURL)
	releaseAll(t, f.r, held)
	return d
}

func TestKeyMemorySendsAKeyBackToWhereItWent(t *testing.T) {
	f := newMemoryFixture(t, 16)
	f.spillToW1(t)
	// Loads [0,1,0,0]: w0 would take the key, but w1 has its prefix and is not overloaded.
	d := f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyRemembered, d.Branch)
	assert.Equal(t, f.urls[1], d.WorkerURL)
	assert.Equal(t, f.urls[0], d.PreferredURL)
	assert.False(t, d.Spilled())
	_, preferred, _ := f.r.LeaseWorkers(d.Lease)
	assert.Equal(t, f.urls[0], preferred)
	assert.Equal(t, uint64(1), f.r.Stats().Branches[BranchExplicitRoutingKeyRemembered])

	// w1 clearly overloaded (loads [0,5,0,0] with the key's two leases: 5 > 1.25*1.5, 5-0 > 2):
	// the key goes back to its ring worker, which is remembered in turn.
	held := f.hold(t, 0, 3, 0, 0)
	d = f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)
	releaseAll(t, f.r, held)
	d = f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch, "w0 is remembered now")
	assert.Equal(t, f.urls[0], d.WorkerURL)
}

func TestWithoutKeyMemoryTheKeyReturnsToItsRingWorker(t *testing.T) {
	f := newMemoryFixture(t, 0)
	f.spillToW1(t)
	d := f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)
}

// Both remembered and ring workers overloaded: the key spills from the ring's worker.
func TestKeyMemoryThenSpill(t *testing.T) {
	f := newMemoryFixture(t, 16)
	f.spillToW1(t)
	held := f.hold(t, 4, 4, 0, 0) // loads [4,5,0,0]: mean 2.25, bound 3.375
	d := f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	assert.Equal(t, f.urls[2], d.WorkerURL)
	assert.Equal(t, f.urls[0], d.PreferredURL)
	releaseAll(t, f.r, held)
	d = f.send(t) // remembered on w2 now
	assert.Equal(t, BranchExplicitRoutingKeyRemembered, d.Branch)
	assert.Equal(t, f.urls[2], d.WorkerURL)
}

// ForgetKeys (contract: "Key memory", "Forgetting every key") forgets every key at once, as
// verl's clear_sticky_cache does after servers join: the key goes back to its ring worker, its
// lease still releases, and the memory takes keys again.
func TestForgetKeysSendsEveryKeyBackToItsRingWorker(t *testing.T) {
	f := newMemoryFixture(t, 16)
	spilled := f.spillToW1(t)
	route(f.r, "another key")
	assert.Equal(t, 2, f.r.ForgetKeys())
	d := f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)
	assert.True(t, f.r.Release(spilled.Lease, false), "a lease taken before the keys were forgotten")
	assert.Equal(t, 1, f.r.ForgetKeys(), "remembered again since")
	assert.Zero(t, f.r.ForgetKeys())
	assert.Zero(t, newTestRouter(t, boundedPolicy(1.25, 1), f.urls).ForgetKeys(), "no memory, nothing to forget")
	checkInvariants(t, f.r)
}

func TestKeyMemoryForgetsAWorkerThatTurnedUnhealthy(t *testing.T) {
	f := newMemoryFixture(t, 16)
	f.spillToW1(t)
	require.NoError(t, f.r.SetHealthy(f.urls[1], false))
	require.NoError(t, f.r.SetHealthy(f.urls[1], true))
	d := f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch, "the outage wiped the memory of w1")
	assert.Equal(t, f.urls[0], d.WorkerURL)
}

func TestKeyMemoryForgetsAWorkerThatLeftEvenIfItCameBack(t *testing.T) {
	f := newMemoryFixture(t, 16)
	f.spillToW1(t)
	require.NoError(t, f.r.RemoveWorker(f.urls[1]))
	require.NoError(t, f.r.AddWorker(f.urls[1])) // a new worker under the same URL
	d := f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)

	f.spillToW1(t)
	require.NoError(t, f.r.SetWorkers([]string{f.urls[0], f.urls[2], f.urls[3]}))
	require.NoError(t, f.r.SetWorkers(f.urls))
	d = f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyHit, d.Branch)
	assert.Equal(t, f.urls[0], d.WorkerURL)
}

func TestKeyMemoryFollowsAWorkerThatStays(t *testing.T) {
	f := newMemoryFixture(t, 16)
	f.spillToW1(t)
	// w1 stays but moves in the membership order; w3 leaves.
	require.NoError(t, f.r.SetWorkers([]string{f.urls[2], f.urls[1], f.urls[0]}))
	d := f.send(t)
	assert.Equal(t, BranchExplicitRoutingKeyRemembered, d.Branch)
	assert.Equal(t, f.urls[1], d.WorkerURL)
	assert.Equal(t, f.urls[0], d.PreferredURL)
}

func TestKeyMemoryEvictsTheLeastRecentlyRoutedKey(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, memoryPolicy(1.5, 2, 2), urls)
	ref := newRefRing(urls, DefaultVirtualNodes)
	var keys []string
	for n := 0; len(keys) < 3; n++ { // three keys that prefer w0 and spill to w1
		key := "evict-" + strconv.Itoa(n)
		if order := ref.order([]byte(key)); order[0] == urls[0] && order[1] == urls[1] {
			keys = append(keys, key)
		}
	}
	held := holdLoads(t, r, []int{3, 0, 0, 0})
	for _, key := range keys { // each spills to w1 and is remembered; the first is forgotten
		d := route(r, key)
		require.Equal(t, urls[1], d.WorkerURL)
		require.True(t, r.Release(d.Lease, false))
	}
	releaseAll(t, r, held)
	assert.Equal(t, 2, r.view.memory.len())
	assert.Equal(t, BranchExplicitRoutingKeyHit, selectKey(r, keys[0]).Branch)
	assert.Equal(t, BranchExplicitRoutingKeyRemembered, selectKey(r, keys[1]).Branch)
	assert.Equal(t, BranchExplicitRoutingKeyRemembered, selectKey(r, keys[2]).Branch)
	// Select changes nothing; a route makes keys[1] the most recent, so a new key forgets keys[2].
	route(r, keys[1])
	route(r, "another key")
	assert.Equal(t, BranchExplicitRoutingKeyRemembered, selectKey(r, keys[1]).Branch)
	assert.Equal(t, BranchExplicitRoutingKeyHit, selectKey(r, keys[2]).Branch)
}

// Only the decisions of an explicit key are remembered; other inputs, Acquire and other
// policies leave the memory alone.
func TestKeyMemoryRemembersExplicitKeysOnly(t *testing.T) {
	f := newMemoryFixture(t, 16)
	for _, req := range []Request{{ImplicitKey: f.key}, {HasTarget: true, TargetIndex: 1, RoutingKey: f.key}, {}} {
		f.r.Route(&req)
	}
	_, _, err := f.r.Acquire(f.urls[2], f.key)
	require.NoError(t, err)
	assert.Zero(t, f.r.view.memory.len())

	for _, kind := range []PolicyKind{PolicyRandom, PolicyRoundRobin, PolicyConsistentHashing} {
		r := newTestRouter(t, Policy{Kind: kind, KeyMemory: 16}, f.urls)
		assert.Nil(t, r.view.memory, "%v ignores key_memory", kind)
	}
}

// With any sequence of routes, releases, health and membership changes, the memory holds at
// most its capacity, and what it recalls is always an available member.
func TestKeyMemoryPropertyNeverRecallsAnUnavailableWorker(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	pool := workerURLs(6)
	r := newTestRouter(t, memoryPolicy(1.25, 1, 8), pool[:4])
	var held []LeaseID
	for step := 0; step < 5000; step++ {
		switch op := rng.IntN(10); {
		case op < 5:
			d := route(r, "k"+strconv.Itoa(rng.IntN(20)))
			held = append(held, d.Lease)
		case op < 7 && len(held) > 0:
			i := rng.IntN(len(held))
			r.Release(held[i], false)
			held = slices.Delete(held, i, i+1)
		case op == 7:
			_ = r.SetHealthy(pool[rng.IntN(6)], rng.IntN(2) == 0)
		case op == 8:
			_ = r.RemoveWorker(pool[rng.IntN(6)])
		default:
			_ = r.AddWorker(pool[rng.IntN(6)])
		}
		r.mu.Lock()
		m := r.view.memory
		require.LessOrEqual(t, m.len(), 8)
		for _, e := range m.entries[1:] {
			if i := m.recall(e.position); i >= 0 {
				w := r.members.workers[i]
				require.Same(t, e.worker, w)
				require.True(t, w.healthy && !w.removed, "recalled %s, healthy %v removed %v", w.url, w.healthy, w.removed)
			}
		}
		r.mu.Unlock()
	}
}

func TestKeyMemoryAllocatesNothing(t *testing.T) {
	urls := workerURLs(8)
	r := newTestRouter(t, memoryPolicy(1.5, 2, 64), urls)
	keys := benchKeys(1000) // more keys than the memory holds: every route evicts one
	i := 0
	next := func() {
		req := KeyRequest(keys[i%len(keys)])
		i++
		r.Release(r.Route(&req).Lease, false)
	}
	for range 2000 {
		next()
	}
	assert.Zero(t, testing.AllocsPerRun(5000, next))
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return s.HeapAlloc
}

// A million distinct keys leave the memory at its capacity, with no more heap than it took
// when the router was built.
func TestKeyMemoryStaysBoundedUnderAMillionKeys(t *testing.T) {
	const capacity, keys = 1 << 16, 1_000_000
	urls := workerURLs(8)
	before := heapInUse()
	r := newTestRouter(t, memoryPolicy(1.5, 2, capacity), urls)
	built := heapInUse()
	key := make([]byte, 0, 32)
	for i := 0; i < keys; i++ {
		key = strconv.AppendInt(append(key[:0], "key-"...), int64(i), 10)
		req := KeyRequest(key)
		r.Release(r.Route(&req).Lease, false)
	}
	after := heapInUse()
	require.Equal(t, capacity, r.view.memory.len())
	t.Logf("key_memory %d: %d bytes when built (%.1f per key), %d bytes more after %d distinct keys",
		capacity, built-before, float64(built-before)/capacity, int64(after)-int64(built), keys)
	assert.Less(t, int64(after)-int64(built), int64(1<<20), "the heap grew with the keys")
	runtime.KeepAlive(r)
}
