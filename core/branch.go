package core

// Branch names the rule that produced a routing decision. The string forms are the contract
// (contract: "The bounded rule") and appear in statistics, metrics and the Python API.
type Branch uint8

const (
	BranchNoHealthyWorkers Branch = iota
	BranchTargetWorkerHit
	BranchTargetWorkerMiss
	BranchExplicitRoutingKeyHit
	BranchExplicitRoutingKeySpillover
	BranchExplicitRoutingKeyNoEligibleCandidate
	BranchImplicitRoutingKeyHit
	BranchRandomFallback
	BranchRoutingKeyHit
	BranchRandom
	BranchRoundRobin
	BranchExplicitRoutingKeyRemembered
	BranchPowerOfTwo
	BranchLeastLoad
	BranchManualOccupiedHit
	BranchManualOccupiedMiss
	BranchManualVacant
	BranchManualNoRoutingKey
	BranchCacheAwarePrefixHit
	BranchCacheAwareKeyHit
	BranchCacheAwareBalance
	BranchCacheAwareNoMatch
	// BranchFailover: a retry of a keyed request after a failure, sent to the next available
	// worker clockwise from the key that it has not tried (contract: Worker failures).
	BranchFailover
	// NumBranches is the number of branches; branch codes are 0..NumBranches-1.
	NumBranches
)

var branchNames = [NumBranches]string{
	BranchNoHealthyWorkers:                      "no_healthy_workers",
	BranchTargetWorkerHit:                       "target_worker_hit",
	BranchTargetWorkerMiss:                      "target_worker_miss",
	BranchExplicitRoutingKeyHit:                 "explicit_routing_key_hit",
	BranchExplicitRoutingKeySpillover:           "explicit_routing_key_spillover",
	BranchExplicitRoutingKeyNoEligibleCandidate: "explicit_routing_key_no_eligible_candidate",
	BranchImplicitRoutingKeyHit:                 "implicit_routing_key_hit",
	BranchRandomFallback:                        "random_fallback",
	BranchRoutingKeyHit:                         "routing_key_hit",
	BranchRandom:                                "random",
	BranchRoundRobin:                            "round_robin",
	BranchExplicitRoutingKeyRemembered:          "explicit_routing_key_remembered",
	BranchPowerOfTwo:                            "power_of_two",
	BranchLeastLoad:                             "least_load",
	BranchManualOccupiedHit:                     "manual_occupied_hit",
	BranchManualOccupiedMiss:                    "manual_occupied_miss",
	BranchManualVacant:                          "manual_vacant",
	BranchManualNoRoutingKey:                    "manual_no_routing_key",
	BranchCacheAwarePrefixHit:                   "cache_aware_prefix_hit",
	BranchCacheAwareKeyHit:                      "cache_aware_key_hit",
	BranchCacheAwareBalance:                     "cache_aware_balance",
	BranchCacheAwareNoMatch:                     "cache_aware_no_match",
	BranchFailover:                              "failover",
}

func (b Branch) String() string {
	if b < NumBranches {
		return branchNames[b]
	}
	return "unknown_branch"
}

// ChoseWorker reports whether the branch names a decision that picked a worker.
func (b Branch) ChoseWorker() bool {
	return b != BranchNoHealthyWorkers && b != BranchTargetWorkerMiss
}
