package core

import (
	"math/bits"
	"math/rand/v2"
)

// keyMemory remembers the last worker of up to a fixed number of explicit routing keys, least
// recently routed forgotten first (docs/contract.md, "Key memory"). After a spill, the worker
// the key spilled to holds the newest copy of its prefix; remembering it sends the key's next
// request there instead of back to the ring's worker.
//
// Everything is allocated when the router is built: the entries, and an open-addressing index
// of twice as many slots (linear probing, backward-shift deletion, as in keyCounts). Recalling
// and remembering a key are O(1) and allocate nothing. An entry does not follow its worker's
// fate: it is checked when recalled, and forgotten for good once the worker has had an outage
// (turned unhealthy or left) since it was remembered.
type keyMemory struct {
	// entries[0] is the sentinel of the recency list, most recent first; the others hold keys.
	entries []memoryEntry
	// slots holds entry numbers (0 is an empty slot); a power of two long, at most half full.
	slots []uint32
	shift uint // 64 - log2(len(slots))
	// seed is random per router, so that clients choosing keys cannot crowd them into one run
	// of slots (key positions are public XXH64 values).
	seed uint64
}

type memoryEntry struct {
	position uint64 // the key's ring position, which stands for the key
	worker   *worker
	outages  uint32 // worker.outages when remembered
	// next and prev link the entries from the most to the least recently routed key.
	next, prev uint32
}

const minMemorySlots = 16

func newKeyMemory(capacity int) *keyMemory {
	size := max(minMemorySlots, 1<<bits.Len(uint(2*capacity-1)))
	return &keyMemory{
		entries: make([]memoryEntry, 1, capacity+1),
		slots:   make([]uint32, size),
		shift:   uint(64 - bits.TrailingZeros(uint(size))),
		seed:    rand.Uint64(),
	}
}

// remembers reports whether a decision of this branch is remembered: every decision of an
// explicit key under bounded_consistent_hashing, including those that stay on the ring's worker
// (the ring's worker may change later, and the key should stay where its prefix is), and every
// keyed decision of manual (a hit refreshes the key's recency).
func remembers(b Branch) bool {
	switch b {
	case BranchExplicitRoutingKeyHit, BranchExplicitRoutingKeySpillover,
		BranchExplicitRoutingKeyNoEligibleCandidate, BranchExplicitRoutingKeyRemembered,
		BranchManualOccupiedHit, BranchManualOccupiedMiss, BranchManualVacant:
		return true
	}
	return false
}

// recall returns the membership index of the key's last worker, or -1 when the key is not
// remembered, its worker has had an outage since, or there is no memory. It changes nothing.
func (m *keyMemory) recall(position uint64) int {
	if m == nil {
		return -1
	}
	e := m.slots[m.find(position)]
	if e == 0 {
		return -1
	}
	entry := &m.entries[e]
	if entry.worker.outages != entry.outages {
		return -1
	}
	return entry.worker.index
}

// holds reports whether the key has an entry, even one whose worker has had an outage since.
func (m *keyMemory) holds(position uint64) bool { return m.slots[m.find(position)] != 0 }

// remember records w as the key's last worker and makes the key the most recently routed.
func (m *keyMemory) remember(position uint64, w *worker) {
	e := m.slots[m.find(position)]
	if e == 0 {
		e = m.claim(position)
	} else {
		m.unlink(e)
	}
	m.entries[e].worker, m.entries[e].outages = w, w.outages
	m.pushFront(e)
}

// len is the number of keys remembered.
func (m *keyMemory) len() int { return len(m.entries) - 1 }

// claim returns an unlinked entry for a new key: a fresh one while there is room, otherwise
// the least recently routed key's, which is forgotten.
func (m *keyMemory) claim(position uint64) uint32 {
	var e uint32
	if len(m.entries) < cap(m.entries) {
		m.entries = append(m.entries, memoryEntry{})
		e = uint32(len(m.entries) - 1)
	} else {
		e = m.entries[0].prev
		m.unlink(e)
		m.vacate(m.find(m.entries[e].position))
	}
	m.entries[e].position = position
	m.slots[m.find(position)] = e
	return e
}

func (m *keyMemory) unlink(e uint32) {
	next, prev := m.entries[e].next, m.entries[e].prev
	m.entries[prev].next, m.entries[next].prev = next, prev
}

func (m *keyMemory) pushFront(e uint32) {
	first := m.entries[0].next
	m.entries[e].next, m.entries[e].prev = first, 0
	m.entries[first].prev, m.entries[0].next = e, e
}

// find returns the index of the key's slot, or of the empty slot where it belongs.
func (m *keyMemory) find(position uint64) int {
	mask := len(m.slots) - 1
	for i := m.home(position); ; i = (i + 1) & mask {
		if e := m.slots[i]; e == 0 || m.entries[e].position == position {
			return i
		}
	}
}

// home is the slot where the key's probe starts (multiplicative hashing of the mixed position).
func (m *keyMemory) home(position uint64) int {
	h := position ^ m.seed
	h ^= h >> 32
	return int((h * 0x9e3779b97f4a7c15) >> m.shift)
}

// vacate empties slot i and moves later slots of the run back into the hole whenever their
// probe started at or before it, so every key stays reachable from its home.
func (m *keyMemory) vacate(i int) {
	mask := len(m.slots) - 1
	for j := (i + 1) & mask; m.slots[j] != 0; j = (j + 1) & mask {
		if (j-m.home(m.entries[m.slots[j]].position))&mask >= (j-i)&mask {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = 0
}

// forget forgets every key and says how many were remembered (those whose worker has had an
// outage since included).
func (m *keyMemory) forget() int {
	n := m.len()
	m.entries = m.entries[:1]
	m.entries[0].next, m.entries[0].prev = 0, 0
	clear(m.slots)
	return n
}

// ForgetKeys forgets the remembered worker of every routing key (the key memory of
// bounded_consistent_hashing, the keys of manual) and says how many keys were remembered; leases
// and loads are untouched (docs/contract.md, "Key memory"). Each key's next request is decided
// as a new key's, so workers that joined since take their share of the keys.
func (r *Router) ForgetKeys() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.view.memory == nil {
		return 0
	}
	return r.view.memory.forget()
}
