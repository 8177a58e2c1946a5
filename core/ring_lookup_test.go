package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRingLookupTableMatchesBinarySearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 150, 1024, 9600} {
		positions := make([]uint64, n)
		for i := range positions {
			positions[i] = rng.Uint64()
		}
		if n > 3 { // duplicates and the extremes of the key space
			positions[0], positions[1], positions[2] = 0, positions[3], ^uint64(0)
		}
		slices.Sort(positions)
		r := newRing(HashRingXXH64, positions, make([]uint32, n))
		assert.LessOrEqual(t, 4*len(r.buckets), 2*n+8, "the table costs at most 2 bytes per entry, plus two buckets")
		probes := []uint64{0, 1, ^uint64(0), ^uint64(0) - 1}
		for _, p := range positions {
			probes = append(probes, p, p-1, p+1)
		}
		for i := 0; i < 2000; i++ {
			probes = append(probes, rng.Uint64())
		}
		for _, p := range probes {
			want := len(positions)
			for i, q := range positions {
				if q >= p {
					want = i
					break
				}
			}
			require.Equal(t, want, r.search(p), "n=%d position %#x", n, p)
		}
	}
}

func TestRingRebuildsKeepTheLookupTable(t *testing.T) {
	urls := workerURLs(9)
	base := buildRing(HashRingXXH64, urls[:8], 20)
	for _, r := range []*ring{base, base.withAppendedWorker(urls, 20), base.withoutWorker(3)} {
		fresh := newRing(HashRingXXH64, r.positions, r.owners)
		assert.Equal(t, fresh.buckets, r.buckets)
		assert.Equal(t, fresh.shift, r.shift)
	}
}
