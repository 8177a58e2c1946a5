package core

import (
	"math"
	"math/rand/v2"
)

// view is what a policy sees when it decides: the membership, its ring, which workers are
// available and their loads. Policies only read it (reading the least load may fill its memo
// in); the router updates it under its lock.
type view struct {
	workers []*worker // membership order
	ring    *ring
	// available lists the indices (into workers) of healthy workers, in membership order;
	// spillable those of them that take spills and enter the least loads: the trusted ones, or
	// all of them when none is (contract: Worker failures).
	available, spillable []uint32
	// spillableLoad and spillablePrefill are the sums of the loads and prefill loads of the
	// spillable workers, kept as running totals so the relative test never has to scan the
	// workers; spillablePrefill only when byPrefill (the policy's balance_by is prefill). The
	// mean is theirs: a suspect worker, which fails fast and holds little, must not pull the
	// bound below every worker a spill may go to.
	spillableLoad, spillablePrefill int64
	byPrefill                       bool
	// least remembers the least load of the spillable workers (see leastLoadMemo), and
	// leastPrefill their least prefill load (kept only when byPrefill). Reading either may fill
	// it in, which is why even a policy's reads happen under the lock.
	least, leastPrefill leastLoadMemo
	// roundRobin is the shared round_robin counter; the router advances it after each route.
	roundRobin uint64
	// memory is the key memory of bounded_consistent_hashing; nil when it is off.
	memory *keyMemory
	// blocks is cache_aware's block index; nil under the other policies.
	blocks *blockIndex
	// randomIndex returns a uniform integer in [0, n); tests replace it to make choices repeatable.
	randomIndex func(n int) int
}

func newView() view {
	v := view{ring: &ring{}, randomIndex: rand.IntN}
	v.forgetLeast()
	return v
}

// isAvailable is the predicate for the preferred worker.
func (v *view) isAvailable(owner uint32) bool { return v.workers[owner].healthy }

// preferred is the first available worker clockwise from a key's position.
func (v *view) preferred(position uint64) int { return v.ring.first(position, v.isAvailable) }

// meanLoad is the mean load, as m measures it, over the spillable workers (there is at least one).
func (v *view) meanLoad(m LoadMeasure) float64 {
	total := v.spillableLoad
	if m == LoadPrefill {
		total = v.spillablePrefill
	}
	return float64(total) / float64(len(v.spillable))
}

// minLoad is the smallest load among the spillable workers (there is at least one).
func (v *view) minLoad() int64 {
	least, _ := v.leastLoadCount()
	return least
}

// leastLoadCount is minLoad and how many spillable workers carry it.
func (v *view) leastLoadCount() (least int64, count int) {
	if v.least.count == 0 {
		v.least = v.scanLeast(LoadInFlight)
	}
	return v.least.load, v.least.count
}

// leastPrefillLoad is the smallest prefill load among the spillable workers (there is at least
// one), under balance_by prefill.
func (v *view) leastPrefillLoad() int64 {
	if v.leastPrefill.count == 0 {
		v.leastPrefill = v.scanLeast(LoadPrefill)
	}
	return v.leastPrefill.load
}

// forgetLeast forgets both memos, after a health or membership change.
func (v *view) forgetLeast() {
	v.least.forget()
	v.leastPrefill.forget()
}

// leastLoaded is minLoad, the first spillable worker (in membership order) carrying it and how
// many do; with no spillable worker, -1, 0 and 0. It looks for the first from the memo's bound.
func (v *view) leastLoaded() (least int64, at, count int) {
	least, count = v.leastLoadCount()
	if count == 0 {
		return -1, 0, 0
	}
	m := &v.least
	for w := v.workers[m.at]; !w.spillable || w.load != least; w = v.workers[m.at] {
		m.at++
	}
	return least, m.at, count
}

// scanLeast is the memo of the least load, as m measures it, from a scan of the spillable workers.
func (v *view) scanLeast(m LoadMeasure) leastLoadMemo {
	least, at, count := int64(-1), 0, 0
	for _, i := range v.spillable {
		w := v.workers[i]
		load := w.load
		if m == LoadPrefill {
			load = w.prefillLoad
		}
		switch {
		case load == least:
			count++
		case load < least || least < 0:
			least, at, count = load, int(i), 1
		}
	}
	if count == 0 {
		return leastLoadMemo{load: math.MinInt64}
	}
	return leastLoadMemo{load: least, count: count, at: at}
}

// leastRanked is the least rank (see rank) among the spillable workers, the first of them in
// membership order carrying it and how many do. Under in_flight it reads the memo; the prefill
// loads have none, so under prefill it scans.
func (v *view) leastRanked(m LoadMeasure) (least rank, at, count int) {
	if m == LoadInFlight {
		load, at, count := v.leastLoaded()
		return rank{load: load}, at, count
	}
	at = -1
	for _, i := range v.spillable {
		switch r := v.workers[i].rank(m); {
		case at >= 0 && r == least:
			count++
		case at < 0 || r.less(least):
			least, at, count = r, int(i), 1
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
		return v.firstClockwiseAt(position, rank{load: least}, LoadInFlight)
	}
	return v.nthAt(least, v.randomIndex(count))
}

// firstClockwiseAt is the first spillable worker clockwise from position whose rank is least.
func (v *view) firstClockwiseAt(position uint64, least rank, m LoadMeasure) int {
	return v.ring.first(position, func(owner uint32) bool {
		w := v.workers[owner]
		return w.spillable && w.rank(m) == least
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
