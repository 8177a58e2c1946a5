package core

// LeaseID identifies a lease: the low 32 bits index a slot of the router's lease table, the
// high 32 bits are that slot's generation when the lease was taken. Releasing bumps the
// generation, so a second release of the same ID (or of a stale one) finds nothing to undo.
// The zero LeaseID is never issued.
type LeaseID uint64

func (id LeaseID) slot() uint32       { return uint32(id) }
func (id LeaseID) generation() uint32 { return uint32(id >> 32) }

type leaseSlot struct {
	generation uint32
	hasKey     bool
	keyPos     uint64
	// worker is nil while the slot is free.
	worker    *worker
	preferred *worker
}

// leaseTable stores active leases in reusable slots, so taking and releasing a lease allocates
// nothing once the table has grown to the peak number of leases in flight.
type leaseTable struct {
	slots  []leaseSlot
	free   []uint32
	active int
}

func (t *leaseTable) take(w, preferred *worker, hasKey bool, keyPos uint64) LeaseID {
	var i uint32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.slots = append(t.slots, leaseSlot{generation: 1})
		i = uint32(len(t.slots) - 1)
	}
	s := &t.slots[i]
	s.worker, s.preferred, s.hasKey, s.keyPos = w, preferred, hasKey, keyPos
	t.active++
	return LeaseID(uint64(s.generation)<<32 | uint64(i))
}

// lookup returns the slot of an active lease, or nil for an unknown, stale or released ID.
func (t *leaseTable) lookup(id LeaseID) *leaseSlot {
	i := id.slot()
	if int64(i) >= int64(len(t.slots)) {
		return nil
	}
	s := &t.slots[i]
	if s.worker == nil || s.generation != id.generation() {
		return nil
	}
	return s
}

// drop frees an active slot. Generation 0 is skipped so that LeaseID 0 stays invalid.
func (t *leaseTable) drop(id LeaseID, s *leaseSlot) {
	*s = leaseSlot{generation: s.generation + 1}
	if s.generation == 0 {
		s.generation = 1
	}
	t.free = append(t.free, id.slot())
	t.active--
}
