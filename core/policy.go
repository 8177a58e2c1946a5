package core

// PolicyKind names a routing policy.
type PolicyKind uint8

const (
	PolicyRandom PolicyKind = iota
	PolicyRoundRobin
	PolicyConsistentHashing
	PolicyBoundedConsistentHashing
	PolicyPowerOfTwo
	PolicyLeastLoad
	PolicyManual
	PolicyCacheAware
)

var policyNames = [...]string{
	PolicyRandom:                   "random",
	PolicyRoundRobin:               "round_robin",
	PolicyConsistentHashing:        "consistent_hashing",
	PolicyBoundedConsistentHashing: "bounded_consistent_hashing",
	PolicyPowerOfTwo:               "power_of_two",
	PolicyLeastLoad:                "least_load",
	PolicyManual:                   "manual",
	PolicyCacheAware:               "cache_aware",
}

// smgOnlyPolicies are SMG's policies this package does not implement: naming one is refused
// with an error that says so, not as an unknown policy.
var smgOnlyPolicies = [...]string{"bucket", "prefix_hash", "passthrough"}

// smgOnly reports whether name is a policy SMG has and this package does not implement.
func smgOnly(name string) bool {
	for _, n := range smgOnlyPolicies {
		if n == name {
			return true
		}
	}
	return false
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

// honorsTarget reports whether the policy routes by X-SMG-Target-Worker (docs/contract.md,
// "Inputs and precedence"); the others ignore it, as SMG's do.
func (k PolicyKind) honorsTarget() bool {
	return k == PolicyConsistentHashing || k.bounds()
}

// Policy is a policy kind with its settings. MaxLoadSkew and MinLoadGap are used by
// bounded_consistent_hashing and cache_aware, SpillTarget and KeyMemory by
// bounded_consistent_hashing only, CacheAware by cache_aware only, AssignmentMode and
// MaxKeys by manual only; other policies leave them zero. HashRing is set by the policies that
// place keys on the ring only (the others keep the default, XXH64, which then places
// only the keys the router counts).
type Policy struct {
	Kind        PolicyKind
	MaxLoadSkew float64
	MinLoadGap  int64
	HashRing    HashRing
	SpillTarget SpillTarget
	// KeyMemory is how many routing keys the router remembers the last worker of; 0 is none.
	KeyMemory int
	// Seed seeds the random policy's choices when HasSeed is set: routers of one seed make the
	// same choices for the same calls. Without it (the default) each router draws its own.
	Seed    uint64
	HasSeed bool
	// AssignmentMode is how manual assigns a worker to a new key (and to keyless requests).
	AssignmentMode AssignmentMode
	// MaxKeys is how many routing keys manual keeps the worker of (1..MaxManualKeys).
	MaxKeys int
	// BalanceBy is the load the bound of bounded_consistent_hashing and cache_aware weighs
	// (docs/contract.md, "Prefill load"); LoadInFlight, the zero value, is the default.
	BalanceBy LoadMeasure
	// CacheAware holds cache_aware's own settings.
	CacheAware CacheAwareSettings
}

// CacheAwareSettings are the settings only cache_aware has.
type CacheAwareSettings struct {
	// BlocksPerWorker is how many prefix blocks cache_aware remembers per worker.
	BlocksPerWorker int
	// CacheThreshold is the fraction of a request's blocks cache_aware must find matched, strictly
	// exceeded, for a prefix hit (SMG's cache_threshold).
	CacheThreshold float64
	// HitWaitFactor, under balance_by prefill, keeps a prefix hit on its worker only while that
	// worker's prefill load exceeds the least by at most this many times the weight of the blocks
	// found there (docs/contract.md, "Prefill load", rule 5); 0, the default, always keeps it.
	HitWaitFactor float64
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
	case PolicyPowerOfTwo:
		return selectPowerOfTwo(v)
	case PolicyLeastLoad:
		return selectLeastLoad(v, req, keyPos)
	case PolicyManual:
		return selectManual(v, req, keyPos, p.AssignmentMode)
	case PolicyCacheAware:
		return selectCacheAware(v, req, keyPos, p)
	default:
		return selectBounded(v, req, keyPos, p)
	}
}
