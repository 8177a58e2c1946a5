package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bounded-router/bounded-router/core"
)

func TestPackDecision(t *testing.T) {
	hit := core.Decision{Branch: core.BranchExplicitRoutingKeyHit, WorkerID: 7, PreferredID: 7}
	assert.Equal(t, uint64(core.BranchExplicitRoutingKeyHit)|7<<6|7<<34, packDecision(hit))

	// The last branch code, above 15 since the manual branches, with the largest ids that fit.
	last := core.NumBranches - 1
	spill := core.Decision{Branch: last, WorkerID: packedIDLimit - 1, PreferredID: 1}
	packed := packDecision(spill)
	assert.Equal(t, uint64(last), packed&0x3F)
	assert.Equal(t, uint64(packedIDLimit-1), packed>>6&(packedIDLimit-1), "the largest id that fits")
	assert.Equal(t, uint64(1), packed>>34&(packedIDLimit-1))
	assert.Zero(t, packed&packedIDsDontFit)

	none := core.Decision{Branch: core.BranchNoHealthyWorkers}
	assert.Less(t, packDecision(none), uint64(64), "no worker: below 64")

	for _, d := range []core.Decision{
		{Branch: core.BranchExplicitRoutingKeyHit, WorkerID: packedIDLimit, PreferredID: packedIDLimit},
		{Branch: core.BranchExplicitRoutingKeySpillover, WorkerID: 3, PreferredID: 1 << 31},
	} {
		assert.Equal(t, uint64(d.Branch)|packedIDsDontFit, packDecision(d), "ids that do not fit: the flag, no ids")
		assert.Less(t, packDecision(d), uint64(1)<<63, "still non-negative as an int64")
	}
}
