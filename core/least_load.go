package core

// selectLeastLoad is least load (docs/contract.md, "least_load"): the available worker with the
// smallest load (the sum of its leases' weights), ties broken by the explicit routing key's ring
// position, else at random (leastLoadedFor). The key decides only among tied workers; the other
// routing inputs are ignored, as by SMG. The view keeps the least load (leastLoadMemo):
// no scan per request, and a ring walk (for a key) or a scan only when several tie.
func selectLeastLoad(v *view, req *Request, keyPos uint64) (int, Branch) {
	return v.leastLoadedFor(keyPos, len(req.RoutingKey) > 0), BranchLeastLoad
}
