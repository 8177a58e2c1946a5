package core

// selectBounded is bounded consistent hashing with an absolute load gap (docs/contract.md, "The
// bounded rule"). Only an explicit routing key may spill; every other input is routed as by strict hashing.
func selectBounded(v *view, req *Request, keyPos uint64, p *Policy) (int, Branch) {
	return selectByPrecedence(v, req, keyPos, func(position uint64) (int, Branch) {
		return selectBoundedExplicit(v, position, p.MaxLoadSkew, p.MinLoadGap)
	}, BranchImplicitRoutingKeyHit)
}

// selectBoundedExplicit keeps the preferred worker unless it is clearly overloaded: its load
// exceeds both the least-loaded available worker's by more than minLoadGap and the mean by
// more than a factor maxLoadSkew (both strict). Then the request spills to the first worker
// clockwise that is available and at most maxLoadSkew times the mean; if none is, it stays.
// The loads never count the request being routed.
func selectBoundedExplicit(v *view, position uint64, maxLoadSkew float64, minLoadGap int64) (int, Branch) {
	preferred := v.preferred(position)
	preferredLoad := v.workers[preferred].load
	bound := v.meanLoad() * maxLoadSkew
	// The relative test needs only the running total; the scan for the minimum and the spill
	// walk run only when it fires.
	if float64(preferredLoad) <= bound || preferredLoad-v.minLoad() <= minLoadGap {
		return preferred, BranchExplicitRoutingKeyHit
	}
	target := v.ring.first(position, func(owner uint32) bool {
		w := v.workers[owner]
		return w.healthy && float64(w.load) <= bound
	})
	if target < 0 {
		return preferred, BranchExplicitRoutingKeyNoEligibleCandidate
	}
	return target, BranchExplicitRoutingKeySpillover
}
