package core

// selectRandom picks uniformly among the available workers; routing inputs are ignored.
func selectRandom(v *view) (int, Branch) {
	return v.randomAvailable(), BranchRandom
}
