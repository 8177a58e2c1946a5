package core

// selectLeastLoad is least load (docs/contract.md, "least_load"): the available worker with the
// smallest load (the sum of its leases' weights), ties to the first in membership order so that
// every process breaks them the same way (SMG picks among ties at random). Routing inputs are
// ignored, as by SMG. The view keeps the least load (leastLoadMemo): no scan per request.
func selectLeastLoad(v *view) (int, Branch) {
	_, at, _ := v.leastLoaded()
	return at, BranchLeastLoad
}
