package core

// selectByPrecedence applies the input precedence shared by both hashing policies
// (docs/contract.md, "Inputs and precedence"): target worker, then explicit key (decided by
// explicit), then implicit key, then a random available worker. The caller has checked that some worker is available, and hashed the
// explicit key into keyPos.
func selectByPrecedence(v *view, req *Request, keyPos uint64, explicit func(position uint64) (int, Branch), implicitBranch Branch) (int, Branch) {
	switch {
	case req.HasTarget:
		return selectTarget(v, req.TargetIndex)
	case len(req.RoutingKey) > 0:
		return explicit(keyPos)
	case len(req.ImplicitKey) > 0:
		return v.preferred(v.ring.keyPosition(req.ImplicitKey)), implicitBranch
	default:
		return v.randomAvailable(), BranchRandomFallback
	}
}

// selectTarget resolves X-SMG-Target-Worker strictly: a valid index into the available workers
// or no worker at all, whatever the loads.
func selectTarget(v *view, index int) (int, Branch) {
	if index < 0 || index >= len(v.available) {
		return -1, BranchTargetWorkerMiss
	}
	return int(v.available[index]), BranchTargetWorkerHit
}
