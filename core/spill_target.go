package core

// SpillTarget says where bounded_consistent_hashing sends a request that spills (docs/contract.md,
// "Spill target"). Either way the target is an available worker whose load is at most
// max_load_skew times the mean, so a spill never lands on a worker that would itself spill.
type SpillTarget uint8

const (
	// SpillClockwise: the first such worker clockwise from the key, the contract's default.
	SpillClockwise SpillTarget = iota
	// SpillLeastLoaded: the least loaded such worker, ties broken by the clockwise order from the
	// key so that every process breaks them the same way. Its spill test counts the ties while
	// it scans for the least load, and it walks the ring only when several workers tie.
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

func spillTargetByName(name string) (SpillTarget, bool) {
	for s, n := range spillTargetNames {
		if n == name {
			return SpillTarget(s), true
		}
	}
	return 0, false
}

// find returns the spill target of a key at position, or -1 when no worker is under the bound.
func (s SpillTarget) find(t *spillTest, position uint64) int {
	v := t.v
	if s == SpillClockwise {
		return v.ring.first(position, func(owner uint32) bool {
			w := v.workers[owner]
			return w.spillable && float64(w.load) <= t.bound
		})
	}
	least := t.leastLoad()
	if float64(least) > t.bound {
		return -1
	}
	// A lone least loaded worker needs no ring walk, which would be long to find it among many.
	if t.leastCount == 1 {
		return t.leastAt
	}
	return v.firstClockwiseAt(position, least)
}
