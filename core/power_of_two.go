package core

// selectPowerOfTwo is the power of two choices (docs/contract.md, "power_of_two"): two distinct
// available workers drawn uniformly at random, and the one with the smaller load (the sum of
// its leases' weights) wins. A tie goes to the first drawn, which is itself a uniform pick of
// the pair, as SMG's coin flip between tied candidates is. Routing inputs are ignored, as by
// SMG. Two draws and two load reads: O(1) whatever the number of workers.
func selectPowerOfTwo(v *view) (int, Branch) {
	n := len(v.spillable)
	if n == 1 {
		return int(v.spillable[0]), BranchPowerOfTwo
	}
	// The second draw skips the first by an offset in 1..n-1, so the two are distinct (SMG's draw).
	i := v.randomIndex(n)
	j := (i + 1 + v.randomIndex(n-1)) % n
	first, second := v.spillable[i], v.spillable[j]
	if v.workers[second].load < v.workers[first].load {
		return int(second), BranchPowerOfTwo
	}
	return int(first), BranchPowerOfTwo
}
