package core

// selectLeastLoad is least load (docs/contract.md, "least_load"): the available worker with the
// smallest load (the sum of its leases' weights), ties broken by the explicit routing key's ring
// position, else at random (leastLoadedFor). The key decides only among tied workers; the other
// routing inputs are ignored, as by SMG. One scan of the available workers, and a second (or a
// ring walk, for a key) only when several tie.
func selectLeastLoad(v *view, req *Request, keyPos uint64) (int, Branch) {
	return v.leastLoadedFor(keyPos, len(req.RoutingKey) > 0), BranchLeastLoad
}
