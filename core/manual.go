package core

// AssignmentMode is how the manual policy picks a worker for a key it does not hold (and for a
// request without a key), with SMG's names (docs/contract.md, "manual").
type AssignmentMode uint8

const (
	// AssignRandom: a uniformly random available worker, SMG's default for manual.
	AssignRandom AssignmentMode = iota
	// AssignMinLoad: the least loaded available worker, ties broken by the key (leastLoadedFor).
	AssignMinLoad
)

var assignmentModeNames = [...]string{AssignRandom: "random", AssignMinLoad: "min_load"}

// smgOnlyAssignmentModes are SMG's assignment modes this package does not implement.
var smgOnlyAssignmentModes = [...]string{"min_group", "delegate"}

func (m AssignmentMode) String() string {
	if int(m) < len(assignmentModeNames) {
		return assignmentModeNames[m]
	}
	return "unknown_assignment_mode"
}

// AssignmentModeNames are the names of the assignment modes, in the order of their values.
func AssignmentModeNames() []string { return assignmentModeNames[:] }

// Defaults and limits of manual: its keys are all allocated when the router is built.
const (
	DefaultMaxKeys = 1 << 16
	MaxManualKeys  = MaxKeyMemory
)

// selectManual is SMG's manual policy (docs/contract.md, "manual"): a routing key keeps the
// worker it was first assigned until that worker turns unhealthy or leaves; adding workers
// never moves a key. The keys live in the router's key memory, at most MaxKeys of them, the
// least recently routed forgotten first, so lookups are O(1) and allocate nothing. Only the
// explicit routing key counts: X-SMG-Target-Worker and the implicit keys are ignored, as by SMG,
// and a request without a key is assigned like a new key but not remembered. The router
// remembers the chosen worker of every keyed decision (remembers); a selection remembers nothing.
func selectManual(v *view, req *Request, keyPos uint64, mode AssignmentMode) (int, Branch) {
	if len(req.RoutingKey) == 0 {
		return mode.assign(v, keyPos, false), BranchManualNoRoutingKey
	}
	if held := v.memory.recall(keyPos); held >= 0 {
		return held, BranchManualOccupiedHit
	}
	if v.memory.holds(keyPos) {
		return mode.assign(v, keyPos, true), BranchManualOccupiedMiss
	}
	return mode.assign(v, keyPos, true), BranchManualVacant
}

// assign picks the worker of a new key (at position, when keyed).
func (m AssignmentMode) assign(v *view, position uint64, keyed bool) int {
	if m == AssignMinLoad {
		return v.leastLoadedFor(position, keyed)
	}
	return v.randomAvailable()
}
