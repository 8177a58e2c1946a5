package main

/*
#define BR_NO_PROTOTYPES
#include "bounded_router.h"
*/
import "C"

import "github.com/bounded-router/bounded-router/core"

// The constants of the public header, as Go sees them. Each one that core also defines is
// checked below at compile time, and br_constants_json reports them to bindings at run time.

const (
	abiVersion = C.BR_ABI_VERSION

	statusOK              = C.BR_OK
	statusInvalidHandle   = C.BR_ERR_INVALID_HANDLE
	statusInvalidArgument = C.BR_ERR_INVALID_ARGUMENT
	statusUnknownWorker   = C.BR_ERR_UNKNOWN_WORKER
	statusDuplicateWorker = C.BR_ERR_DUPLICATE_WORKER
	statusInternal        = C.BR_ERR_INTERNAL

	decisionBranchBits     = C.BR_DECISION_BRANCH_BITS
	decisionWorkerShift    = C.BR_DECISION_WORKER_SHIFT
	decisionPreferredShift = C.BR_DECISION_PREFERRED_SHIFT
	packedIDLimit          = C.BR_DECISION_ID_LIMIT
	packedIDsDontFit       = 1 << 62 // BR_DECISION_IDS_DONT_FIT, a cast cgo cannot evaluate

	maxArgLen = C.BR_MAX_ARG_LEN
)

// same compiles only when its argument is 0: a header constant that differs from core's (or a
// branch added on one side only) stops the build.
type same [1]struct{}

var (
	_ = same{}[C.BR_BRANCH_NO_HEALTHY_WORKERS-core.BranchNoHealthyWorkers]
	_ = same{}[C.BR_BRANCH_TARGET_WORKER_HIT-core.BranchTargetWorkerHit]
	_ = same{}[C.BR_BRANCH_TARGET_WORKER_MISS-core.BranchTargetWorkerMiss]
	_ = same{}[C.BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT-core.BranchExplicitRoutingKeyHit]
	_ = same{}[C.BR_BRANCH_EXPLICIT_ROUTING_KEY_SPILLOVER-core.BranchExplicitRoutingKeySpillover]
	_ = same{}[C.BR_BRANCH_EXPLICIT_ROUTING_KEY_NO_ELIGIBLE_CANDIDATE-core.BranchExplicitRoutingKeyNoEligibleCandidate]
	_ = same{}[C.BR_BRANCH_IMPLICIT_ROUTING_KEY_HIT-core.BranchImplicitRoutingKeyHit]
	_ = same{}[C.BR_BRANCH_RANDOM_FALLBACK-core.BranchRandomFallback]
	_ = same{}[C.BR_BRANCH_ROUTING_KEY_HIT-core.BranchRoutingKeyHit]
	_ = same{}[C.BR_BRANCH_RANDOM-core.BranchRandom]
	_ = same{}[C.BR_BRANCH_ROUND_ROBIN-core.BranchRoundRobin]
	_ = same{}[C.BR_BRANCH_EXPLICIT_ROUTING_KEY_REMEMBERED-core.BranchExplicitRoutingKeyRemembered]
	_ = same{}[C.BR_BRANCH_POWER_OF_TWO-core.BranchPowerOfTwo]
	_ = same{}[C.BR_BRANCH_LEAST_LOAD-core.BranchLeastLoad]
	_ = same{}[C.BR_BRANCH_MANUAL_OCCUPIED_HIT-core.BranchManualOccupiedHit]
	_ = same{}[C.BR_BRANCH_MANUAL_OCCUPIED_MISS-core.BranchManualOccupiedMiss]
	_ = same{}[C.BR_BRANCH_MANUAL_VACANT-core.BranchManualVacant]
	_ = same{}[C.BR_BRANCH_MANUAL_NO_ROUTING_KEY-core.BranchManualNoRoutingKey]
	_ = same{}[C.BR_BRANCH_CACHE_AWARE_PREFIX_HIT-core.BranchCacheAwarePrefixHit]
	_ = same{}[C.BR_BRANCH_CACHE_AWARE_KEY_HIT-core.BranchCacheAwareKeyHit]
	_ = same{}[C.BR_BRANCH_CACHE_AWARE_BALANCE-core.BranchCacheAwareBalance]
	_ = same{}[C.BR_BRANCH_CACHE_AWARE_NO_MATCH-core.BranchCacheAwareNoMatch]
	_ = same{}[C.BR_BRANCH_FAILOVER-core.BranchFailover]
	_ = same{}[C.BR_BRANCH_COUNT-core.NumBranches]
	_ = same{}[C.BR_OUTCOME_SUCCESS-core.OutcomeSuccess]
	_ = same{}[C.BR_OUTCOME_FAILURE-core.OutcomeFailure]
	_ = same{}[C.BR_OUTCOME_PUSHBACK-core.OutcomePushback]
	_ = same{}[C.BR_OUTCOME_NEUTRAL-core.OutcomeNeutral]
	_ = same{}[C.BR_OUTCOME_COUNT-core.NumOutcomes]
	_ = same{}[C.BR_MAX_LEASE_WEIGHT-core.MaxLeaseWeight]
	_ = same{}[C.BR_MAX_PREFIX_BLOCKS-core.MaxPrefixBlocks]
	// Every branch code (0..NumBranches-1) fits in the decision's branch bits.
	_ = same{}[(core.NumBranches-1)>>decisionBranchBits]
	// The worker id field ends where the preferred id's begins.
	_ = same{}[1<<(decisionPreferredShift-decisionWorkerShift)-packedIDLimit]
)

// constants is what br_constants_json reports: everything a binding needs to agree on with the
// library, from this one place.
func constants() map[string]any {
	branches := make([]string, core.NumBranches)
	for b := range branches {
		branches[b] = core.Branch(b).String()
	}
	defaults := core.DefaultConfig()
	return map[string]any{
		"abi_version": abiVersion,
		"status": map[string]int{
			"ok": statusOK, "invalid_handle": statusInvalidHandle, "invalid_argument": statusInvalidArgument,
			"unknown_worker": statusUnknownWorker, "duplicate_worker": statusDuplicateWorker, "internal": statusInternal,
		},
		"branches":   branches,
		"outcomes":   core.OutcomeNames(),
		"conditions": core.ConditionNames(),
		"decision": map[string]uint64{
			"branch_bits": decisionBranchBits, "worker_shift": decisionWorkerShift,
			"preferred_shift": decisionPreferredShift, "id_limit": packedIDLimit, "ids_dont_fit": packedIDsDontFit,
		},
		"limits": map[string]int64{
			"max_virtual_nodes": core.MaxVirtualNodes, "max_ring_entries": core.MaxRingEntries,
			"max_min_load_gap": core.MaxMinLoadGap, "max_arg_len": maxArgLen,
			"max_key_memory": core.MaxKeyMemory, "max_lease_weight": core.MaxLeaseWeight,
			"max_prefix_blocks": core.MaxPrefixBlocks, "max_blocks_per_worker": core.MaxBlocksPerWorker,
			"max_keys": core.MaxManualKeys, "max_routing_key_headers": core.MaxRoutingKeyHeaders,
		},
		"defaults": map[string]any{
			"policy": defaults.Policy.Kind.String(), "max_load_skew": defaults.Policy.MaxLoadSkew,
			"min_load_gap": defaults.Policy.MinLoadGap, "virtual_nodes": defaults.VirtualNodes,
			"hash_ring": defaults.Policy.HashRing.String(), "spill_target": defaults.Policy.SpillTarget.String(),
			"key_memory": defaults.Policy.KeyMemory, "assignment_mode": core.AssignRandom.String(),
			"max_keys": core.DefaultMaxKeys, "routing_key_headers": core.DefaultRoutingKeyHeaders(),
			"blocks_per_worker": core.DefaultBlocksPerWorker, "cache_threshold": core.DefaultCacheThreshold,
			"balance_by": defaults.Policy.BalanceBy.String(), "hit_wait_factor": defaults.Policy.CacheAware.HitWaitFactor,
		},
		"assignment_modes": core.AssignmentModeNames(),
		"spill_targets":    core.SpillTargetNames(),
		"balance_by":       core.LoadMeasureNames(),
		"policies":         core.PolicyNames(),
		"hash_rings":       core.HashRingNames(),
		"headers":          core.RoutingHeaders(),
	}
}
