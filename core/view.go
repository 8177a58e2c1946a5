package core

import "math/rand/v2"

// view is what a policy sees when it decides: the membership, its ring, which workers are
// available and their loads. Policies only read it; the router updates it under its lock.
type view struct {
	workers []*worker // membership order
	ring    *ring
	// available lists the indices (into workers) of healthy workers, in membership order;
	// spillable those of them that take spills and enter the least loads: the trusted ones, or
	// all of them when none is (contract: Worker failures).
	available, spillable []uint32
	// availableLoad is the sum of the loads of the available workers, kept as a running total
	// so the relative test never has to scan the workers.
	availableLoad int64
	// roundRobin is the shared round_robin counter; the router advances it after each route.
	roundRobin uint64
	// memory is the key memory of bounded_consistent_hashing; nil when it is off.
	memory *keyMemory
	// blocks is cache_aware's block index; nil under the other policies.
	blocks *blockIndex
	// randomIndex returns a uniform integer in [0, n); tests replace it to make choices repeatable.
	randomIndex func(n int) int
}

func newView() view { return view{ring: &ring{}, randomIndex: rand.IntN} }

// isAvailable is the predicate for the preferred worker.
func (v *view) isAvailable(owner uint32) bool { return v.workers[owner].healthy }

// preferred is the first available worker clockwise from a key's position.
func (v *view) preferred(position uint64) int { return v.ring.first(position, v.isAvailable) }

// meanLoad is the mean load over the available workers (there is at least one).
func (v *view) meanLoad() float64 {
	return float64(v.availableLoad) / float64(len(v.available))
}

// minLoad is the smallest load among the spillable workers. It scans them, so callers use it
// only once cheaper tests have passed.
func (v *view) minLoad() int64 {
	least := v.workers[v.spillable[0]].load
	for _, i := range v.spillable[1:] {
		least = min(least, v.workers[i].load)
	}
	return least
}

// leastLoaded is minLoad that also returns the first spillable worker (in membership order)
// carrying the least load and how many do, in the same single scan.
func (v *view) leastLoaded() (least int64, at, count int) {
	least = -1
	for _, i := range v.spillable {
		switch load := v.workers[i].load; {
		case load == least:
			count++
		case load < least || least < 0:
			least, at, count = load, int(i), 1
		}
	}
	return least, at, count
}

// leastLoadedFor is the least loaded available worker, ties broken by the request's routing key
// (docs/contract.md, "Ties by the key"): the first tied worker clockwise from the key's position
// when keyed, else a uniformly random tied worker. Breaking ties by membership order would send
// every new key on an idle fleet to the first worker.
func (v *view) leastLoadedFor(position uint64, keyed bool) int {
	least, at, count := v.leastLoaded()
	switch {
	case count == 1:
		return at
	case keyed:
		return v.firstClockwiseAt(position, least)
	}
	return v.nthAt(least, v.randomIndex(count))
}

// firstClockwiseAt is the first spillable worker clockwise from position whose load is least.
func (v *view) firstClockwiseAt(position uint64, least int64) int {
	return v.ring.first(position, func(owner uint32) bool {
		w := v.workers[owner]
		return w.spillable && w.load == least
	})
}

// nthAt is the spillable worker number n (from 0, in membership order) among those whose load is least.
func (v *view) nthAt(least int64, n int) int {
	for _, i := range v.spillable {
		if v.workers[i].load == least {
			if n == 0 {
				return int(i)
			}
			n--
		}
	}
	panic("core: nthAt past the tied workers")
}

// randomAvailable picks an available worker uniformly.
func (v *view) randomAvailable() int {
	return int(v.available[v.randomIndex(len(v.available))])
}
