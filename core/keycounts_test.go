package core

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type keyPair struct {
	worker   uint32
	position uint64
}

// checkKeyCounts compares the table with a map model and checks that every entry is reachable
// from its home without crossing an empty entry (what backward-shift deletion must preserve).
func checkKeyCounts(t *testing.T, tbl *keyCounts, model map[keyPair]uint32) {
	t.Helper()
	require.Equal(t, len(model), tbl.used)
	mask := len(tbl.entries) - 1
	seen := 0
	for i, e := range tbl.entries {
		if e.leases == 0 {
			continue
		}
		seen++
		require.Equal(t, model[keyPair{e.worker, e.position}], e.leases)
		for j := tbl.home(e.worker, e.position); j != i; j = (j + 1) & mask {
			require.NotZero(t, tbl.entries[j].leases, "entry %d is cut off from its home by an empty entry %d", i, j)
		}
	}
	require.Equal(t, len(model), seen)
}

func TestKeyCountsFirstAndLast(t *testing.T) {
	tbl := newKeyCounts()
	assert.True(t, tbl.add(1, 42))
	assert.False(t, tbl.add(1, 42))
	assert.True(t, tbl.add(2, 42), "same key on another worker is another pair")
	assert.True(t, tbl.add(1, 43))
	assert.False(t, tbl.remove(1, 42))
	assert.True(t, tbl.remove(1, 42))
	assert.True(t, tbl.add(1, 42), "a pair counted down to zero starts again")
	checkKeyCounts(t, &tbl, map[keyPair]uint32{{1, 42}: 1, {2, 42}: 1, {1, 43}: 1})
}

func TestKeyCountsAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tbl := newKeyCounts()
	model := map[keyPair]uint32{}
	var live []keyPair
	for step := 0; step < 200000; step++ {
		// Few workers and positions that share their high bits, so probe runs are long and
		// deletions have to shift entries back across wrap-around.
		if len(live) == 0 || rng.IntN(100) < 52 {
			p := keyPair{uint32(rng.IntN(4)), uint64(rng.IntN(3000)) << 50}
			first := model[p] == 0
			assert.Equal(t, first, tbl.add(p.worker, p.position))
			model[p]++
			live = append(live, p)
		} else {
			i := rng.IntN(len(live))
			p := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			model[p]--
			assert.Equal(t, model[p] == 0, tbl.remove(p.worker, p.position))
			if model[p] == 0 {
				delete(model, p)
			}
		}
		if step%5000 == 0 {
			checkKeyCounts(t, &tbl, model)
		}
	}
	checkKeyCounts(t, &tbl, model)
	assert.LessOrEqual(t, 2*tbl.used, len(tbl.entries))
}

func TestKeyCountsSeedDiffersPerTable(t *testing.T) {
	a, b := newKeyCounts(), newKeyCounts()
	assert.NotEqual(t, a.seed, b.seed)
}
