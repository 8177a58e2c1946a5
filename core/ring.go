package core

import (
	"math/bits"
	"slices"
	"sort"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultVirtualNodes is the number of ring positions each worker owns unless configured (as SMG).
const DefaultVirtualNodes = 150

// ring is an immutable consistent-hash ring. Entry i sits at positions[i] and belongs to the
// worker at index owners[i] of the membership list it was built for. Keeping positions and
// owners in two parallel slices costs 12 bytes per virtual node.
//
// A binary search over 150 entries per worker misses the cache on most of its steps, so a
// lookup table narrows it first: buckets[b] is the index of the first entry whose position's
// top bits are >= b. With about one bucket per two entries the search that remains covers a
// handful of adjacent entries, and the table adds at most 2 bytes per virtual node.
type ring struct {
	positions []uint64
	owners    []uint32
	buckets   []uint32
	// shift turns a position into its bucket: position >> shift.
	shift uint
}

// newRing wraps sorted entries and builds their lookup table.
func newRing(positions []uint64, owners []uint32) *ring {
	if len(positions) == 0 {
		return &ring{positions: positions, owners: owners}
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
	return &ring{positions: positions, owners: owners, buckets: buckets, shift: shift}
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

// virtualNodePosition is where virtual node i of a worker sits: XXH64("<url>#<i>"), seed 0.
func virtualNodePosition(buf []byte, url string, i int) ([]byte, uint64) {
	buf = append(buf[:0], url...)
	buf = append(buf, '#')
	buf = strconv.AppendInt(buf, int64(i), 10)
	return buf, xxhash.Sum64(buf)
}

// KeyPosition is where a routing key lands on the ring: XXH64(key), seed 0.
func KeyPosition(key []byte) uint64 { return xxhash.Sum64(key) }

// ringEntry is one virtual node while a ring is being assembled.
type ringEntry struct {
	position uint64
	owner    uint32
}

// workerEntries returns the sorted virtual nodes of one worker.
func workerEntries(url string, owner uint32, virtualNodes int) []ringEntry {
	entries := make([]ringEntry, virtualNodes)
	buf := make([]byte, 0, len(url)+12)
	for i := range entries {
		var pos uint64
		buf, pos = virtualNodePosition(buf, url, i)
		entries[i] = ringEntry{position: pos, owner: owner}
	}
	return entries
}

// buildRing builds the ring of a membership list from scratch. The result depends only on the
// set of URLs: entries are ordered by (position, url), never by membership order.
func buildRing(urls []string, virtualNodes int) *ring {
	entries := make([]ringEntry, 0, len(urls)*virtualNodes)
	for owner, url := range urls {
		entries = append(entries, workerEntries(url, uint32(owner), virtualNodes)...)
	}
	slices.SortFunc(entries, func(a, b ringEntry) int { return compareEntries(a, b, urls) })
	return fromEntries(entries)
}

// compareEntries orders by position, then by URL so that equal positions (astronomically rare)
// still sort the same way in every process.
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

func fromEntries(entries []ringEntry) *ring {
	positions, owners := make([]uint64, len(entries)), make([]uint32, len(entries))
	for i, e := range entries {
		positions[i], owners[i] = e.position, e.owner
	}
	return newRing(positions, owners)
}

// withAppendedWorker returns the ring for urls, whose last element is a worker the receiver
// does not have yet. It merges that worker's sorted virtual nodes into the existing order
// instead of sorting the whole ring again: a binary search finds where each one goes, and the
// existing entries in between are copied in one go.
func (r *ring) withAppendedWorker(urls []string, virtualNodes int) *ring {
	added := workerEntries(urls[len(urls)-1], uint32(len(urls)-1), virtualNodes)
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
	return newRing(positions, owners)
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
	return newRing(slices.Clip(positions), slices.Clip(owners))
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
