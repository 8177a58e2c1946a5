package core

// SpillTarget says where bounded_consistent_hashing sends a request that spills (docs/contract.md,
// "Spill target"). Either way the target is an available worker whose load is at most
// max_load_skew times the mean, so a spill never lands on a worker that would itself spill.
type SpillTarget uint8

const (
	// SpillClockwise: the first such worker clockwise from the key, the contract's default.
	SpillClockwise SpillTarget = iota
	// SpillLeastLoaded: the least loaded such worker, ties broken by the clockwise order from the
	// key so that every process breaks them the same way (under balance_by prefill, the least
	// rank: see rank). It walks the ring only when several workers tie.
	SpillLeastLoaded
)

var spillTargetNames = [...]string{SpillClockwise: "clockwise", SpillLeastLoaded: "least_loaded"}

func (s SpillTarget) String() string {
	if int(s) < len(spillTargetNames) {
		return spillTargetNames[s]
	}
	return "unknown_spill_target"
}

// SpillTargetNames are the names of the spill targets, in the order of their values.
func SpillTargetNames() []string { return spillTargetNames[:] }

// find returns the spill target of a key at position, or -1 when no worker is under the bound.
func (s SpillTarget) find(t *spillTest, position uint64) int {
	v := t.v
	if s == SpillClockwise && t.by == LoadPrefill {
		return v.ring.first(position, func(owner uint32) bool {
			w := v.workers[owner]
			return w.spillable && float64(w.prefillLoad) <= t.bound
		})
	}
	if s == SpillClockwise {
		// Apart from the prefill walk above so that this walk, the default's, reads w.load alone.
		return v.ring.first(position, func(owner uint32) bool {
			w := v.workers[owner]
			return w.spillable && float64(w.load) <= t.bound
		})
	}
	least, at, count := v.leastRanked(t.by)
	if float64(least.load) > t.bound {
		return -1
	}
	// A lone least loaded worker needs no ring walk, which would be long to find it among many.
	if count == 1 {
		return at
	}
	return v.firstClockwiseAt(position, least, t.by)
}
