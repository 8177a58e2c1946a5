package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recency returns w's indexed blocks from the most to the least recent.
func recency(x *blockIndex, w *worker) []uint64 {
	var out []uint64
	s := w.blocks.sentinel
	if s == 0 {
		return out
	}
	for n := x.nodes[s].older; n != s; n = x.nodes[n].older {
		out = append(out, x.nodes[n].block)
	}
	return out
}

// holders returns the ids of the workers holding block, sorted.
func holders(x *blockIndex, block uint64) []uint32 {
	var ids []uint32
	for n := x.firstHolder(block); n != 0; n = x.nodes[n].nextHolder {
		ids = append(ids, x.nodes[n].worker.id)
	}
	slices.Sort(ids)
	return ids
}

// checkIndex verifies that the recency lists, the workers' maps, the holder lists and the size
// describe the same pairs, and that no worker holds more than the capacity.
func checkIndex(t testing.TB, x *blockIndex, workers []*worker) {
	t.Helper()
	pairs := 0
	byBlock := map[uint64][]uint32{}
	for _, w := range workers {
		blocks := recency(x, w)
		require.LessOrEqual(t, len(blocks), x.capacity, "worker %s holds more than its capacity", w.url)
		require.Len(t, w.blocks.nodes, len(blocks), "worker %s: map and recency list differ", w.url)
		for _, b := range blocks {
			require.Contains(t, w.blocks.nodes, b)
			byBlock[b] = append(byBlock[b], w.id)
		}
		pairs += len(blocks)
	}
	require.Equal(t, pairs, x.len())
	require.Len(t, x.byBlock, len(byBlock), "holder lists of blocks no worker holds")
	for b, ids := range byBlock {
		slices.Sort(ids)
		require.Equal(t, ids, holders(x, b), "holders of block %d", b)
	}
}

func TestBlockIndexRecordsAndMatches(t *testing.T) {
	ws := indexedWorkers(2)
	x := newBlockIndex(8)
	x.record(ws[0], []uint64{1, 2, 3})
	x.record(ws[1], []uint64{1, 2, 4})
	checkIndex(t, x, ws)
	assert.Equal(t, []uint32{ws[0].id, ws[1].id}, holders(x, 2))
	assert.Equal(t, []uint32{ws[0].id}, holders(x, 3))
	assert.Empty(t, holders(x, 5))
	assert.Equal(t, 3, x.matched(ws[0], []uint64{1, 2, 3, 9}))
	assert.Equal(t, 2, x.matched(ws[1], []uint64{1, 2, 3}))
	assert.Equal(t, 0, x.matched(ws[1], []uint64{7, 1}))
	// The beginning of the latest prefix is the most recent, so its end is forgotten first.
	assert.Equal(t, []uint64{1, 2, 3}, recency(x, ws[0]))
}

func TestBlockIndexForgetsTheEndsOfPrefixesFirst(t *testing.T) {
	ws := indexedWorkers(1)
	x := newBlockIndex(4)
	x.record(ws[0], []uint64{1, 2, 3})
	x.record(ws[0], []uint64{1, 5, 6}) // 1 is touched, 5 and 6 added: 3 then goes
	checkIndex(t, x, ws)
	assert.Equal(t, []uint64{1, 5, 6, 2}, recency(x, ws[0]))
	x.record(ws[0], []uint64{8})
	assert.Equal(t, []uint64{8, 1, 5, 6}, recency(x, ws[0]), "2, the least recent, forgotten")
	assert.Empty(t, holders(x, 2))
	checkIndex(t, x, ws)
}

func TestBlockIndexRecordsOnlyTheFirstCapacityBlocks(t *testing.T) {
	ws := indexedWorkers(1)
	x := newBlockIndex(3)
	x.record(ws[0], []uint64{9})
	x.record(ws[0], []uint64{1, 2, 3, 4, 5})
	assert.Equal(t, []uint64{1, 2, 3}, recency(x, ws[0]), "a prefix longer than the capacity keeps its beginning")
	checkIndex(t, x, ws)
}

func TestBlockIndexForget(t *testing.T) {
	ws := indexedWorkers(3)
	x := newBlockIndex(4)
	x.record(ws[0], []uint64{1, 2})
	x.record(ws[1], []uint64{1, 3})
	x.record(ws[2], []uint64{1, 2})
	x.forget(ws[1])
	checkIndex(t, x, ws)
	assert.Equal(t, []uint32{ws[0].id, ws[2].id}, holders(x, 1))
	assert.Empty(t, holders(x, 3))
	assert.Equal(t, 0, x.matched(ws[1], []uint64{1}))
	x.forget(ws[1]) // twice is nothing
	x.forget(ws[0])
	x.forget(ws[2])
	checkIndex(t, x, ws)
	assert.Empty(t, x.byBlock)
	// Freed nodes are reused before the pool grows.
	grown := len(x.nodes)
	x.record(ws[0], []uint64{5, 6})
	assert.Len(t, x.nodes, grown)
	var none *blockIndex
	none.forget(ws[0])
	assert.Equal(t, 0, none.len())
}

// Random records and forgets keep the index consistent and within capacity, and match a model
// of plain per-worker recency lists.
func TestBlockIndexAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ws := indexedWorkers(4)
	x := newBlockIndex(6)
	model := make([][]uint64, len(ws)) // per worker, most recent first
	for step := 0; step < 5000; step++ {
		i := rng.IntN(len(ws))
		if rng.IntN(50) == 0 {
			x.forget(ws[i])
			model[i] = nil
			continue
		}
		blocks := make([]uint64, rng.IntN(9))
		for j := range blocks {
			blocks[j] = uint64(rng.IntN(12))
		}
		x.record(ws[i], blocks)
		model[i] = checkRecordAgainstModel(t, x, ws, i, model[i], blocks, step)
	}
	checkIndex(t, x, ws)
}

// checkRecordAgainstModel applies the naive rule to the model of worker i's list (touch every
// block, last first), compares it with the index's list and, every 100 steps, checks the index.
func checkRecordAgainstModel(t *testing.T, x *blockIndex, ws []*worker, i int, model, blocks []uint64, step int) []uint64 {
	t.Helper()
	for j := len(blocks) - 1; j >= 0; j-- {
		model = slices.Insert(slices.DeleteFunc(model, func(b uint64) bool { return b == blocks[j] }), 0, blocks[j])
		model = model[:min(len(model), x.capacity)]
	}
	require.Equal(t, append([]uint64{}, model...), append([]uint64{}, recency(x, ws[i])...), "step %d", step)
	if step%100 == 0 {
		checkIndex(t, x, ws)
	}
	return model
}

// Recording after a decision whose path holds the worker's nodes (which record moves as runs)
// matches the same model, with requests that repeat earlier ones, share their beginnings and
// repeat blocks.
func TestBlockIndexRecordAlongThePathAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ws := indexedWorkers(3)
	x := newBlockIndex(10)
	model := make([][]uint64, len(ws))
	requests := make([][]uint64, 6)
	for step := 0; step < 20000; step++ {
		i := rng.IntN(len(ws))
		r := rng.IntN(len(requests))
		switch rng.IntN(8) {
		case 0:
			requests[r] = make([]uint64, rng.IntN(12))
			for j := range requests[r] {
				requests[r][j] = uint64(rng.IntN(16))
			}
		case 1:
			requests[r] = append(slices.Clone(requests[rng.IntN(len(requests))]), uint64(rng.IntN(16)))
		}
		blocks := requests[r]
		// The path of a decision: w's node of each leading block, or another worker's, or stale.
		x.depth = 0
		for _, b := range blocks {
			n, ok := ws[i].blocks.nodes[b]
			if !ok || rng.IntN(20) == 0 {
				break
			}
			if rng.IntN(30) == 0 {
				n = x.nodes[n].older
			}
			x.extendPath(n)
		}
		x.record(ws[i], blocks)
		model[i] = checkRecordAgainstModel(t, x, ws, i, model[i], blocks, step)
	}
	checkIndex(t, x, ws)
}

func TestBlockIndexRecordAllocatesNothingOnceGrown(t *testing.T) {
	ws := indexedWorkers(2)
	x := newBlockIndex(64)
	prefixes := [][]uint64{make([]uint64, 40), make([]uint64, 40), make([]uint64, 40)}
	for p := range prefixes {
		for i := range prefixes[p] {
			prefixes[p][i] = uint64(p*1000 + i)
		}
	}
	step := 0
	run := func() {
		x.record(ws[step%2], prefixes[step%3])
		step++
	}
	for range 100 {
		run()
	}
	assert.Zero(t, testing.AllocsPerRun(1000, run))
}
