package core

import (
	"math/bits"
	"math/rand/v2"
)

// keyCounts counts the active leases of every (worker, explicit key) pair of a router, so that
// each worker's number of distinct keys in flight can be kept as a plain counter. It replaces a
// map per worker: a route and its release each touch it once, and the runtime's map cost a
// third of the route+release time (hashing, seed resets when a map empties, growth checks).
//
// It is an open-addressing table with linear probing and backward-shift deletion, so it has no
// tombstones and never needs cleaning; it grows to twice the peak number of pairs and allocates
// nothing until it has to grow again.
type keyCounts struct {
	entries []keyCount // a power of two long, at most half full
	used    int
	shift   uint // 64 - log2(len(entries))
	// seed is random per router: key positions are public hash values, and a client that
	// chooses keys must not be able to pile them into one run of entries.
	seed uint64
}

type keyCount struct {
	position uint64 // the key's ring position
	worker   uint32 // the worker's id
	leases   uint32 // active leases of the pair; 0 marks an empty entry
}

const minKeyCountEntries = 16

func newKeyCounts() keyCounts { return keyCounts{seed: rand.Uint64()} }

// add counts one more lease of the pair and reports whether it is the pair's only one.
func (t *keyCounts) add(worker uint32, position uint64) (first bool) {
	if 2*(t.used+1) > len(t.entries) {
		t.grow()
	}
	e := &t.entries[t.find(worker, position)]
	if e.leases > 0 {
		e.leases++
		return false
	}
	*e = keyCount{position: position, worker: worker, leases: 1}
	t.used++
	return true
}

// remove counts one lease of the pair less and reports whether it was the pair's last one.
// The pair must have been added.
func (t *keyCounts) remove(worker uint32, position uint64) (last bool) {
	i := t.find(worker, position)
	if t.entries[i].leases--; t.entries[i].leases > 0 {
		return false
	}
	t.vacate(i)
	return true
}

// find returns the index of the pair's entry, or of the empty entry where it belongs.
func (t *keyCounts) find(worker uint32, position uint64) int {
	mask := len(t.entries) - 1
	for i := t.home(worker, position); ; i = (i + 1) & mask {
		if e := &t.entries[i]; e.leases == 0 || (e.position == position && e.worker == worker) {
			return i
		}
	}
}

// home is the index where the pair's probe starts (multiplicative hashing of the mixed pair).
func (t *keyCounts) home(worker uint32, position uint64) int {
	h := (position ^ t.seed) + uint64(worker)*0x9e3779b97f4a7c15
	h ^= h >> 32
	return int((h * 0xd6e8feb86659fd93) >> t.shift)
}

// vacate empties entry i and moves later entries of the run back into the hole whenever their
// probe started at or before it, so every entry stays reachable from its home.
func (t *keyCounts) vacate(i int) {
	mask := len(t.entries) - 1
	for j := (i + 1) & mask; t.entries[j].leases > 0; j = (j + 1) & mask {
		e := t.entries[j]
		if (j-t.home(e.worker, e.position))&mask >= (j-i)&mask {
			t.entries[i] = e
			i = j
		}
	}
	t.entries[i] = keyCount{}
	t.used--
}

func (t *keyCounts) grow() {
	old := t.entries
	size := max(2*len(old), minKeyCountEntries)
	t.entries = make([]keyCount, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, e := range old {
		if e.leases > 0 {
			t.entries[t.find(e.worker, e.position)] = e
		}
	}
}
