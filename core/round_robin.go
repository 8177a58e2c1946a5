package core

// selectRoundRobin cycles through the available workers with the router's shared counter;
// routing inputs are ignored.
func selectRoundRobin(v *view) (int, Branch) {
	return int(v.available[v.roundRobin%uint64(len(v.available))]), BranchRoundRobin
}
