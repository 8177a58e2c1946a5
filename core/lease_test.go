package core

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLeaseIDLayout(t *testing.T) {
	id := LeaseID(uint64(7)<<32 | 42)
	assert.Equal(t, uint32(42), id.slot())
	assert.Equal(t, uint32(7), id.generation())
}

func TestLeaseTableTakeLookupDrop(t *testing.T) {
	var tbl leaseTable
	w, p := newWorker("a", 1), newWorker("b", 2)
	id := tbl.take(w, p, true, 99, 1)
	assert.NotZero(t, id)
	assert.Equal(t, uint32(0), id.slot())
	assert.NotZero(t, id.generation())
	assert.Equal(t, 1, tbl.active)

	s := tbl.lookup(id)
	require.NotNil(t, s)
	assert.Same(t, w, s.worker)
	assert.Same(t, p, s.preferred)
	assert.True(t, s.hasKey)
	assert.Equal(t, uint64(99), s.keyPos)

	tbl.drop(id, s)
	assert.Equal(t, 0, tbl.active)
	assert.Nil(t, tbl.lookup(id), "a released ID finds nothing")
	assert.Equal(t, []uint32{0}, tbl.free)

	// The slot is reused under a new generation; the old ID stays dead.
	id2 := tbl.take(w, w, false, 0, 1)
	assert.Equal(t, uint32(0), id2.slot())
	assert.NotEqual(t, id.generation(), id2.generation())
	assert.NotEqual(t, id, id2)
	assert.Nil(t, tbl.lookup(id))
	s2 := tbl.lookup(id2)
	require.NotNil(t, s2)
	assert.False(t, s2.hasKey)
	assert.Len(t, tbl.slots, 1)
}

func TestLeaseTableUnknownIDs(t *testing.T) {
	var tbl leaseTable
	assert.Nil(t, tbl.lookup(0))
	assert.Nil(t, tbl.lookup(LeaseID(math.MaxUint64)))
	id := tbl.take(newWorker("a", 1), nil, false, 0, 1)
	assert.Nil(t, tbl.lookup(0), "LeaseID 0 is never valid")
	assert.Nil(t, tbl.lookup(id+1), "slot out of range")
	assert.Nil(t, tbl.lookup(id+1<<32), "wrong generation")
	assert.Nil(t, tbl.lookup(id-1<<32), "generation 0")
	assert.NotNil(t, tbl.lookup(id))
}

func TestLeaseTableGenerationWrapSkipsZero(t *testing.T) {
	// The process-wide generation counter wraps around after 2^32 leases; 0 is never handed out.
	var tbl leaseTable
	w := newWorker("a", 1)
	leaseGenerations.Store(math.MaxUint32 - 1)
	id := tbl.take(w, w, false, 0, 1)
	assert.Equal(t, uint32(math.MaxUint32), id.generation())
	s := tbl.lookup(id)
	require.NotNil(t, s)
	tbl.drop(id, s)
	next := tbl.take(w, w, false, 0, 1)
	assert.NotZero(t, next)
	assert.Equal(t, uint32(1), next.generation(), "generation 0 is skipped")
	assert.Nil(t, tbl.lookup(id))
	assert.Nil(t, tbl.lookup(next&^(math.MaxUint32<<32)), "generation 0 finds nothing")
}

func TestLeaseTableReusesSlots(t *testing.T) {
	var tbl leaseTable
	w := newWorker("a", 1)
	seen := map[LeaseID]bool{}
	var ids []LeaseID
	for i := 0; i < 10; i++ {
		ids = append(ids, tbl.take(w, w, false, 0, 1))
	}
	for round := 0; round < 50; round++ {
		for _, id := range ids {
			require.False(t, seen[id], "an ID is never issued twice")
			seen[id] = true
			s := tbl.lookup(id)
			require.NotNil(t, s)
			tbl.drop(id, s)
		}
		require.Equal(t, 0, tbl.active)
		for i := range ids {
			ids[i] = tbl.take(w, w, false, 0, 1)
		}
		require.Equal(t, 10, tbl.active)
	}
	assert.Len(t, tbl.slots, 10, "the table grows only to the peak number of leases")
}

func TestRouterLeaseIDsAreNeverReissued(t *testing.T) {
	r := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(2))
	first := route(r, "k")
	require.True(t, r.Release(first.Lease, false))
	second := route(r, "k")
	assert.NotEqual(t, first.Lease, second.Lease)
	assert.False(t, r.Release(first.Lease, false), "a stale ID cannot release the slot's new lease")
	assert.Equal(t, int64(1), r.Workers()[0].Load+r.Workers()[1].Load)
	assert.True(t, r.Release(second.Lease, false))
}

func TestLeaseOfAnotherRouterReleasesNothing(t *testing.T) {
	// Lease IDs are unique across the routers of a process: an ID passed to the wrong router
	// (e.g. through the C API) must not release that router's lease in the same slot.
	a := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(2))
	b := newTestRouter(t, boundedPolicy(1.5, 2), workerURLs(2))
	for round := 0; round < 3; round++ {
		la, lb := route(a, "k"), route(b, "k")
		require.NotEqual(t, la.Lease, lb.Lease)
		assert.False(t, b.Release(la.Lease, false), "a lease of router a released on router b")
		assert.False(t, a.Release(lb.Lease, true), "a lease of router b released on router a")
		_, _, ok := b.LeaseWorkers(la.Lease)
		assert.False(t, ok)
		assert.Equal(t, int64(1), loadByURL(b)[lb.WorkerURL])
		assert.Equal(t, Stats{Branches: b.Stats().Branches, ActiveLeases: 1}, b.Stats())
		assert.True(t, a.Release(la.Lease, false))
		assert.True(t, b.Release(lb.Lease, false))
		checkInvariants(t, a)
		checkInvariants(t, b)
	}
}
