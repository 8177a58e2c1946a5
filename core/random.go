package core

import "math/rand/v2"

// selectRandom picks uniformly among the available workers; routing inputs are ignored.
func selectRandom(v *view) (int, Branch) {
	return v.randomAvailable(), BranchRandom
}

// seededIndex returns the random source of a router of the random policy with a seed: a PCG
// generator of its own, so that two routers of one seed, called alike, choose alike. It is
// called under the router's lock, like every use of the view.
func seededIndex(seed uint64) func(n int) int {
	return rand.New(rand.NewPCG(seed, seedStream)).IntN
}

// seedStream is the PCG stream of seeded routers: any fixed value, so a seed alone decides.
const seedStream = 0x9e3779b97f4a7c15
