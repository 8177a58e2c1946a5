package core

import "sync/atomic"

// LeaseID identifies a lease: the low 32 bits index a slot of the router's lease table, the
// high 32 bits are the generation the slot was given when the lease was taken. Generations come
// from one process-wide counter, so an ID is never issued twice by any router of the process
// (until 2^32 leases later): a second release of the same ID, a stale one, or the ID of another
// router's lease finds nothing to undo. The zero LeaseID is never issued.
type LeaseID uint64

// leaseGenerations hands out generations to every lease table of the process.
var leaseGenerations atomic.Uint32

// nextGeneration returns a generation no lease table has been given recently; never 0.
func nextGeneration() uint32 {
	g := leaseGenerations.Add(1)
	if g == 0 {
		g = leaseGenerations.Add(1)
	}
	return g
}

func (id LeaseID) slot() uint32       { return uint32(id) }
func (id LeaseID) generation() uint32 { return uint32(id >> 32) }

type leaseSlot struct {
	// generation is that of the slot's active lease; 0 while the slot is free.
	generation uint32
	// reports is its worker's count of engine load reports when the lease was taken: the lease
	// counts in the worker's routing load until a later report covers it (engine_load.go).
	reports uint32
	keyPos  uint64
	// weight is what the lease counts on its worker's load.
	weight int64
	// worker is nil while the slot is free.
	worker    *worker
	preferred *worker
	hasKey    bool
	// waiting is set until the lease is marked as having seen its first token; while it is,
	// the weight counts on the worker's prefill load too.
	waiting bool
	// ejections is its worker's count of ejections when the lease was taken: the outcome of a
	// request sent before the latest ejection does not move the breaker (worker_health.go).
	ejections uint32
}

// leaseTable stores active leases in reusable slots, so taking and releasing a lease allocates
// nothing once the table has grown to the peak number of leases in flight.
type leaseTable struct {
	slots  []leaseSlot
	free   []uint32
	active int
}

func (t *leaseTable) take(w, preferred *worker, hasKey bool, keyPos uint64, weight int64) LeaseID {
	var i uint32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.slots = append(t.slots, leaseSlot{})
		i = uint32(len(t.slots) - 1)
	}
	s := &t.slots[i]
	s.generation = nextGeneration()
	s.worker, s.preferred, s.hasKey, s.keyPos, s.weight, s.reports = w, preferred, hasKey, keyPos, weight, w.reports
	s.ejections = uint32(w.breaker.ejections)
	s.waiting = true
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

// drop frees an active slot; its next lease gets a new generation.
func (t *leaseTable) drop(id LeaseID, s *leaseSlot) {
	*s = leaseSlot{}
	t.free = append(t.free, id.slot())
	t.active--
}
