package core

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"sort"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"github.com/zeebo/blake3"
)

// DefaultVirtualNodes is the number of ring positions each worker owns unless configured (as SMG).
const DefaultVirtualNodes = 150

// HashRing names the hash that places virtual nodes and keys on the ring (docs/contract.md,
// "The ring"). Everything else about the ring is the same for both.
type HashRing uint8

const (
	// HashRingXXH64 is this package's ring: XXH64 with seed 0. The default.
	HashRingXXH64 HashRing = iota
	// HashRingSMG is SMG's ring: the first 8 bytes, little-endian, of BLAKE3.
	HashRingSMG
)

var hashRingNames = [...]string{HashRingXXH64: "xxh64", HashRingSMG: "smg"}

// HashRingNames are the names of the rings, in the order of their values.
func HashRingNames() []string { return hashRingNames[:] }

func (h HashRing) String() string {
	if int(h) < len(hashRingNames) {
		return hashRingNames[h]
	}
	return "unknown_hash_ring"
}

// Position is where data (a routing key, or "<url>#<i>" for a virtual node) lands on the ring.
func (h HashRing) Position(data []byte) uint64 {
	if h == HashRingSMG {
		sum := blake3.Sum256(data)
		return binary.LittleEndian.Uint64(sum[:8])
	}
	return xxhash.Sum64(data)
}

// ring is an immutable consistent-hash ring. Entry i sits at positions[i] and belongs to the
// worker at index owners[i] of the membership list it was built for. Keeping positions and
// owners in two parallel slices costs 12 bytes per virtual node.
//
// A binary search over 150 entries per worker misses the cache on most of its steps, so a
// lookup table narrows it first: buckets[b] is the index of the first entry whose position's
// top bits are >= b. With about one bucket per two entries the search that remains covers a
// handful of adjacent entries, and the table adds at most 2 bytes per virtual node.
type ring struct {
	// hash placed every entry; keys are looked up with the same one.
	hash      HashRing
	positions []uint64
	owners    []uint32
	buckets   []uint32
	// shift turns a position into its bucket: position >> shift.
	shift uint
}

// newRing wraps entries placed by hash, sorted, and builds their lookup table.
func newRing(hash HashRing, positions []uint64, owners []uint32) *ring {
	if len(positions) == 0 {
		return &ring{hash: hash, positions: positions, owners: owners}
	}
	tableBits := max(bits.Len(uint(len(positions)))-2, 0)
	shift := uint(64 - tableBits)
	buckets := make([]uint32, 1<<tableBits+1)
	next := 0 // buckets before next are filled: each with the first entry at or above it
	for i, position := range positions {
		for top := int(position >> shift); next <= top; next++ {
			buckets[next] = uint32(i)
		}
	}
	for ; next < len(buckets); next++ {
		buckets[next] = uint32(len(positions))
	}
	return &ring{hash: hash, positions: positions, owners: owners, buckets: buckets, shift: shift}
}

// search returns the index of the first entry at or after position (len(positions) if none).
// Entries before buckets[b] sit in lower buckets and entries from buckets[b+1] on in higher
// ones, so the answer lies between the two.
func (r *ring) search(position uint64) int {
	b := position >> r.shift // 0 for a one-bucket table: Go shifts by 64 to 0
	lo, hi := int(r.buckets[b]), int(r.buckets[b+1])
	i, _ := slices.BinarySearch(r.positions[lo:hi], position)
	return lo + i
}

// virtualNodePosition is where virtual node i of a worker sits: hash("<url>#<i>"), i in decimal.
func virtualNodePosition(hash HashRing, buf []byte, url string, i int) ([]byte, uint64) {
	buf = append(buf[:0], url...)
	buf = append(buf, '#')
	buf = strconv.AppendInt(buf, int64(i), 10)
	return buf, hash.Position(buf)
}

// keyPosition is where a key lands on this ring.
func (r *ring) keyPosition(key []byte) uint64 { return r.hash.Position(key) }

// ringEntry is one virtual node while a ring is being assembled.
type ringEntry struct {
	position uint64
	owner    uint32
}

// workerEntries returns the virtual nodes of one worker.
func workerEntries(hash HashRing, url string, owner uint32, virtualNodes int) []ringEntry {
	entries := make([]ringEntry, virtualNodes)
	buf := make([]byte, 0, len(url)+12)
	for i := range entries {
		var pos uint64
		buf, pos = virtualNodePosition(hash, buf, url, i)
		entries[i] = ringEntry{position: pos, owner: owner}
	}
	return entries
}

// buildRing builds the ring of a membership list from scratch. The result depends only on the
// hash and the set of URLs: entries are ordered by (position, url), never by membership order.
func buildRing(hash HashRing, urls []string, virtualNodes int) *ring {
	entries := make([]ringEntry, 0, len(urls)*virtualNodes)
	for owner, url := range urls {
		entries = append(entries, workerEntries(hash, url, uint32(owner), virtualNodes)...)
	}
	slices.SortFunc(entries, func(a, b ringEntry) int { return compareEntries(a, b, urls) })
	return fromEntries(hash, entries)
}

// compareEntries orders by position, then by URL so that equal positions (astronomically rare)
// still sort the same way in every process. SMG leaves the order of equal positions
// unspecified (an unstable sort), so no rule could match it there.
func compareEntries(a, b ringEntry, urls []string) int {
	switch {
	case a.position < b.position:
		return -1
	case a.position > b.position:
		return 1
	}
	switch ua, ub := urls[a.owner], urls[b.owner]; {
	case ua < ub:
		return -1
	case ua > ub:
		return 1
	}
	return 0
}

func fromEntries(hash HashRing, entries []ringEntry) *ring {
	positions, owners := make([]uint64, len(entries)), make([]uint32, len(entries))
	for i, e := range entries {
		positions[i], owners[i] = e.position, e.owner
	}
	return newRing(hash, positions, owners)
}

// withAppendedWorker returns the ring for urls, whose last element is a worker the receiver
// does not have yet. It merges that worker's sorted virtual nodes into the existing order
// instead of sorting the whole ring again: a binary search finds where each one goes, and the
// existing entries in between are copied in one go.
func (r *ring) withAppendedWorker(urls []string, virtualNodes int) *ring {
	added := workerEntries(r.hash, urls[len(urls)-1], uint32(len(urls)-1), virtualNodes)
	slices.SortFunc(added, func(a, b ringEntry) int { return compareEntries(a, b, urls) })
	positions := make([]uint64, 0, len(r.positions)+len(added))
	owners := make([]uint32, 0, len(r.owners)+len(added))
	i := 0
	for _, e := range added {
		before := sort.Search(len(r.positions)-i, func(k int) bool {
			return compareEntries(ringEntry{r.positions[i+k], r.owners[i+k]}, e, urls) >= 0
		})
		positions, owners = append(positions, r.positions[i:i+before]...), append(owners, r.owners[i:i+before]...)
		i += before
		positions, owners = append(positions, e.position), append(owners, e.owner)
	}
	positions = append(positions, r.positions[i:]...)
	owners = append(owners, r.owners[i:]...)
	return newRing(r.hash, positions, owners)
}

// withoutWorker returns the ring with every virtual node of the worker at index removed dropped,
// and the owners above it shifted down by one, matching the membership list without it.
func (r *ring) withoutWorker(removed uint32) *ring {
	positions := make([]uint64, 0, len(r.positions))
	owners := make([]uint32, 0, len(r.owners))
	for i, owner := range r.owners {
		if owner == removed {
			continue
		}
		if owner > removed {
			owner--
		}
		positions, owners = append(positions, r.positions[i]), append(owners, owner)
	}
	return newRing(r.hash, slices.Clip(positions), slices.Clip(owners))
}

// first walks clockwise from position (wrapping around) and returns the owner of the first
// virtual node whose worker satisfies accept, or -1 when no worker does. A worker seen again
// is simply tested again: accept is pure, so the answer is the same as visiting each worker once.
func (r *ring) first(position uint64, accept func(owner uint32) bool) int {
	n := len(r.positions)
	if n == 0 {
		return -1
	}
	start := r.search(position)
	for step := 0; step < n; step++ {
		i := start + step
		if i >= n {
			i -= n
		}
		if owner := r.owners[i]; accept(owner) {
			return int(owner)
		}
	}
	return -1
}
