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
	id := tbl.take(w, p, true, 99)
	assert.NotZero(t, id)
	assert.Equal(t, uint32(0), id.slot())
	assert.Equal(t, uint32(1), id.generation())
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
	id2 := tbl.take(w, w, false, 0)
	assert.Equal(t, uint32(0), id2.slot())
	assert.Equal(t, uint32(2), id2.generation())
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
	id := tbl.take(newWorker("a", 1), nil, false, 0)
	assert.Nil(t, tbl.lookup(0), "LeaseID 0 is never valid")
	assert.Nil(t, tbl.lookup(id+1), "slot out of range")
	assert.Nil(t, tbl.lookup(id+1<<32), "wrong generation")
	assert.Nil(t, tbl.lookup(id-1<<32), "generation 0")
	assert.NotNil(t, tbl.lookup(id))
}

func TestLeaseTableGenerationWrapSkipsZero(t *testing.T) {
	var tbl leaseTable
	w := newWorker("a", 1)
	id := tbl.take(w, w, false, 0)
	tbl.slots[0].generation = math.MaxUint32
	id = LeaseID(uint64(math.MaxUint32)<<32 | uint64(id.slot()))
	s := tbl.lookup(id)
	require.NotNil(t, s)
	tbl.drop(id, s)
	assert.Equal(t, uint32(1), tbl.slots[0].generation, "generation 0 is skipped")
	next := tbl.take(w, w, false, 0)
	assert.NotZero(t, next)
	assert.Equal(t, uint32(1), next.generation())
	assert.Nil(t, tbl.lookup(id))
}

func TestLeaseTableReusesSlots(t *testing.T) {
	var tbl leaseTable
	w := newWorker("a", 1)
	seen := map[LeaseID]bool{}
	var ids []LeaseID
	for i := 0; i < 10; i++ {
		ids = append(ids, tbl.take(w, w, false, 0))
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
			ids[i] = tbl.take(w, w, false, 0)
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
