package core

import (
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkEngineNames verifies that every entry of a worker's engine map names a node of that
// worker which carries the name, so the map holds at most one entry per indexed block.
func checkEngineNames(t testing.TB, x *blockIndex, workers []*worker) {
	t.Helper()
	for _, w := range workers {
		require.LessOrEqual(t, len(w.blocks.engine), len(w.blocks.nodes), "worker %s: more engine names than blocks", w.url)
		for e, n := range w.blocks.engine {
			require.Equal(t, w, x.nodes[n].worker, "engine name %d of %s names another worker's node", e, w.url)
			require.Equal(t, e, x.nodes[n].engine, "engine name %d of %s names a node that lost it", e, w.url)
			require.Equal(t, n, w.blocks.nodes[x.nodes[n].block])
		}
	}
}

func TestReportedBlocksAreHeldAndRemovedByTheEnginesNames(t *testing.T) {
	ws := indexedWorkers(2)
	x := newBlockIndex(8)
	x.storeReported(ws[0], []uint64{1, 2, 3}, []uint64{101, 102, 103})
	x.record(ws[1], []uint64{1, 2})
	checkIndex(t, x, ws)
	checkEngineNames(t, x, ws)
	assert.Equal(t, []uint64{1, 2, 3}, recency(x, ws[0]), "stored as a route records: the first the most recent")
	x.removeReported(ws[0], []uint64{102, 999, 2}) // 999 was never reported; 2 is ours, named 102 now
	assert.Equal(t, []uint64{1, 3}, recency(x, ws[0]))
	assert.Equal(t, []uint32{ws[1].id}, holders(x, 2), "the other worker keeps its block")
	// A block the engine names as we do is found by our name.
	x.removeReported(ws[1], []uint64{2})
	assert.Equal(t, []uint64{1}, recency(x, ws[1]))
	checkIndex(t, x, ws)
	checkEngineNames(t, x, ws)
}

func TestReportedBlocksBoundTheEngineMapByTheIndex(t *testing.T) {
	ws := indexedWorkers(1)
	x := newBlockIndex(4)
	blocks, names := make([]uint64, 10), make([]uint64, 10)
	for i := range blocks {
		blocks[i], names[i] = uint64(i+1), uint64(i+1001)
	}
	x.storeReported(ws[0], blocks, names)
	assert.Equal(t, []uint64{1, 2, 3, 4}, recency(x, ws[0]), "a report longer than the index keeps its beginning")
	assert.Len(t, ws[0].blocks.engine, 4)
	x.record(ws[0], []uint64{50, 51, 52}) // pushes 2, 3, 4 out: their names go with them
	assert.Len(t, ws[0].blocks.engine, 1)
	checkEngineNames(t, x, ws)
	// A block forgotten by the index and routed again is still found by our name.
	x.record(ws[0], []uint64{3})
	x.removeReported(ws[0], []uint64{1003})
	assert.Contains(t, recency(x, ws[0]), uint64(3), "1003 was forgotten with the node")
	x.removeReported(ws[0], []uint64{3})
	assert.NotContains(t, recency(x, ws[0]), uint64(3))
}

func TestReportedBlockRenamed(t *testing.T) {
	ws := indexedWorkers(1)
	x := newBlockIndex(8)
	x.storeReported(ws[0], []uint64{1}, []uint64{101})
	x.storeReported(ws[0], []uint64{1}, []uint64{201}) // the same tokens under another engine name
	checkEngineNames(t, x, ws)
	assert.Len(t, ws[0].blocks.engine, 1, "one name per block: the latest")
	x.removeReported(ws[0], []uint64{101})
	assert.Equal(t, []uint64{1}, recency(x, ws[0]), "the old name no longer finds it")
	x.storeReported(ws[0], []uint64{2}, []uint64{201}) // the name moves to another block
	checkEngineNames(t, x, ws)
	x.removeReported(ws[0], []uint64{201})
	assert.Equal(t, []uint64{1}, recency(x, ws[0]))
	checkIndex(t, x, ws)
}

// reportModel is one worker's index as plain data: its blocks, most recent first, and the
// engine's names of the reported ones.
type reportModel struct {
	blocks []uint64
	names  map[uint64]uint64 // engine name -> block
}

// record touches every block, last first, forgetting the least recent (and its name) when full.
func (m *reportModel) record(blocks []uint64, capacity int) {
	for j := len(blocks) - 1; j >= 0; j-- {
		b := blocks[j]
		if !slices.Contains(m.blocks, b) && len(m.blocks) == capacity {
			m.unname(m.blocks[len(m.blocks)-1])
			m.blocks = m.blocks[:len(m.blocks)-1]
		}
		m.blocks = slices.Insert(slices.DeleteFunc(m.blocks, func(h uint64) bool { return h == b }), 0, b)
	}
}

func (m *reportModel) unname(b uint64) {
	maps.DeleteFunc(m.names, func(_, held uint64) bool { return held == b })
}

func (m *reportModel) store(blocks, engine []uint64, capacity int) {
	m.record(blocks, capacity)
	for j, b := range blocks {
		if slices.Contains(m.blocks, b) {
			m.unname(b)
			m.names[engine[j]] = b
		}
	}
}

func (m *reportModel) remove(engine []uint64) {
	for _, e := range engine {
		b, ok := m.names[e]
		if !ok && slices.Contains(m.blocks, e) {
			b, ok = e, true
		}
		if ok {
			m.unname(b)
			m.blocks = slices.DeleteFunc(m.blocks, func(h uint64) bool { return h == b })
		}
	}
}

// Random routes, reports, removals and clears keep the index and the engine maps consistent,
// and match a model of per-worker recency lists with a name per block.
func TestReportedBlocksAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ws := indexedWorkers(3)
	x := newBlockIndex(6)
	model := make([]reportModel, len(ws))
	for i := range model {
		model[i].names = map[uint64]uint64{}
	}
	for step := 0; step < 20000; step++ {
		i := rng.IntN(len(ws))
		blocks, engine := make([]uint64, rng.IntN(8)), make([]uint64, 0, 8)
		for j := range blocks {
			blocks[j] = uint64(rng.IntN(12))
			engine = append(engine, blocks[j]+uint64(rng.IntN(2))*100) // named as we do, or not
		}
		switch rng.IntN(10) {
		case 0:
			x.forget(ws[i])
			model[i] = reportModel{names: map[uint64]uint64{}}
		case 1, 2, 3:
			x.storeReported(ws[i], blocks, engine)
			model[i].store(blocks, engine, x.capacity)
		case 4, 5:
			x.removeReported(ws[i], engine)
			model[i].remove(engine)
		default:
			x.record(ws[i], blocks)
			model[i].record(blocks, x.capacity)
		}
		require.Equal(t, append([]uint64{}, model[i].blocks...), append([]uint64{}, recency(x, ws[i])...), "step %d", step)
		names := map[uint64]uint64{}
		for e, n := range ws[i].blocks.engine {
			names[e] = x.nodes[n].block
		}
		require.Equal(t, model[i].names, names, "step %d: engine names", step)
		if step%100 == 0 {
			checkIndex(t, x, ws)
			checkEngineNames(t, x, ws)
		}
	}
}

func TestRouterRoutesByReportedBlocks(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	require.NoError(t, r.StoreBlocks(urls[2], []uint64{1, 2, 3}, []uint64{101, 102, 103}))
	d := r.Route(prefixRequest("", 1, 2, 3, 4))
	assert.Equal(t, BranchCacheAwarePrefixHit, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	require.True(t, r.Release(d.Lease, false))
	block, ok := r.ReportedBlock(urls[2], 103)
	assert.True(t, ok)
	assert.Equal(t, uint64(3), block)
	// The engine evicts 101 (block 1): nothing matches the request's first block any more on
	// w2 except what the route itself recorded there ([1,2,3,4]): remove those too.
	require.NoError(t, r.RemoveBlocks(urls[2], []uint64{101}))
	assert.Equal(t, []int{0, 0, 3, 0}, indexedBlocks(r))
	require.NoError(t, r.ClearBlocks(urls[2]))
	assert.Equal(t, []int{0, 0, 0, 0}, indexedBlocks(r))
	_, ok = r.ReportedBlock(urls[2], 103)
	assert.False(t, ok)
}

func TestRouterBlockReportErrors(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, cachePolicy(1.5, 2, 64), urls)
	err := r.StoreBlocks("http://127.0.0.1:9/none", []uint64{1}, nil)
	assert.True(t, errors.Is(err, ErrUnknownWorker), "%v", err)
	assert.EqualError(t, r.StoreBlocks(urls[0], []uint64{1, 2}, []uint64{1}), "invalid configuration: engine_hashes must name each of the 2 blocks, got 1")
	assert.ErrorContains(t, r.RemoveBlocks(urls[0], make([]uint64, MaxPrefixBlocks+1)), "at most 65536 blocks")
	_, ok := r.ReportedBlock("http://127.0.0.1:9/none", 1)
	assert.False(t, ok)
	hashing := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
	assert.EqualError(t, hashing.ClearBlocks(urls[0]), "invalid configuration: block reports apply only to cache_aware, not consistent_hashing")
}
