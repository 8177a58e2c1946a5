package core

// PolicyKind names a routing policy.
type PolicyKind uint8

const (
	PolicyRandom PolicyKind = iota
	PolicyRoundRobin
	PolicyConsistentHashing
	PolicyBoundedConsistentHashing
	PolicyCacheAware
)

var policyNames = [...]string{
	PolicyRandom:                   "random",
	PolicyRoundRobin:               "round_robin",
	PolicyConsistentHashing:        "consistent_hashing",
	PolicyBoundedConsistentHashing: "bounded_consistent_hashing",
	PolicyCacheAware:               "cache_aware",
}

// PolicyNames are the names of the policies, in the order of their kinds.
func PolicyNames() []string { return policyNames[:] }

func (k PolicyKind) String() string {
	if int(k) < len(policyNames) {
		return policyNames[k]
	}
	return "unknown_policy"
}

// hashes reports whether the policy routes keys on the ring, and so has a hash_ring setting.
func (k PolicyKind) hashes() bool {
	return k == PolicyConsistentHashing || k == PolicyBoundedConsistentHashing || k == PolicyCacheAware
}

// bounds reports whether the policy has the load bound's settings, max_load_skew and min_load_gap.
func (k PolicyKind) bounds() bool {
	return k == PolicyBoundedConsistentHashing || k == PolicyCacheAware
}

// Policy is a policy kind with its settings. MaxLoadSkew and MinLoadGap are used by
// bounded_consistent_hashing and cache_aware, SpillTarget and KeyMemory by
// bounded_consistent_hashing only, BlocksPerWorker by cache_aware only; other policies ignore
// them. HashRing is set by the policies that place keys on the ring only (the others keep the default, XXH64, which then places
// only the keys the router counts).
type Policy struct {
	Kind        PolicyKind
	MaxLoadSkew float64
	MinLoadGap  int64
	HashRing    HashRing
	SpillTarget SpillTarget
	// KeyMemory is how many routing keys the router remembers the last worker of; 0 is none.
	KeyMemory int
	// BlocksPerWorker is how many prefix blocks cache_aware remembers per worker.
	BlocksPerWorker int
}

// selectWorker returns the index of the chosen worker (or -1) and the branch that chose it.
// It reads the view and changes nothing. keyPos is the position of req.RoutingKey, hashed once by
// the router because the lease counts the key too.
func (p *Policy) selectWorker(v *view, req *Request, keyPos uint64) (int, Branch) {
	if len(v.available) == 0 {
		return -1, BranchNoHealthyWorkers
	}
	switch p.Kind {
	case PolicyRandom:
		return selectRandom(v)
	case PolicyRoundRobin:
		return selectRoundRobin(v)
	case PolicyConsistentHashing:
		return selectConsistent(v, req, keyPos)
	case PolicyCacheAware:
		return selectCacheAware(v, req, keyPos, p)
	default:
		return selectBounded(v, req, keyPos, p)
	}
}
