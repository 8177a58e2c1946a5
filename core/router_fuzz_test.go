package core

import (
	"strconv"
	"testing"
)

// FuzzRouterOperations runs any sequence of calls on the core API (decoded from the input,
// two bytes per call) and checks after every call that the router's bookkeeping is intact,
// that every decision is one the policy may make, that each worker's load is exactly the sum
// of the weights of the leases held on it and its requests their number, and that the key
// memory stays within its capacity and recalls only available members; at the end every lease
// is released exactly once and every load and key count, on members and on removed workers, is
// back to zero. The first byte also turns on the options of bounded_consistent_hashing (the
// second's bit 5 balance_by prefill); first tokens are marked on held leases, and each worker's
// prefill load is checked against the weights of those not marked.
func FuzzRouterOperations(f *testing.F) {
	f.Add([]byte{3, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5})
	f.Add([]byte{3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0})
	f.Add([]byte{0, 0, 0x11, 0, 0x15, 0, 0x24, 0, 0x30, 0, 0x44, 0, 0x50, 0x0f})
	f.Add([]byte{1, 5, 0x60, 1, 0x61, 2, 0x70, 0, 0x80, 3, 0x90, 0, 0xa0, 1, 0xb0, 0, 0xc0, 0})
	f.Add([]byte{2, 1, 0x30, 0x00, 0x33, 0x3f, 0x40, 1, 0x42, 0, 0x00, 0, 0x00, 0})
	f.Add([]byte{3 | 4 | 8 | 16, 3, 0, 1, 1, 2, 2, 3, 0, 4, 0x60, 0, 0, 5, 0xc1, 0, 0, 6, 0xa0, 1, 0x90, 1, 0, 7, 0xf0, 9})
	f.Add([]byte{3 | 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 0x60, 0, 0x60, 0, 0x60, 0, 0, 0, 1, 0, 2, 0})
	f.Add([]byte{3 | 4 | 16, 32, 0, 1, 0, 2, 0, 3, 0xc0, 0, 0xc0, 1, 0, 4, 0, 5, 0xc0, 2, 0x60, 0, 0xc0, 0, 0, 6, 0x60, 1})
	for extra := byte(1); extra <= 3; extra++ { // power_of_two, least_load, manual
		f.Add([]byte{extra<<5 | 16, extra, 0, 1, 1, 2, 2, 3, 0, 4, 0x60, 0, 0, 5, 0xc1, 0, 0, 6, 0xa0, 1, 0x90, 1, 0, 7, 0xf0, 9})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		pool := workerURLs(6)
		policy := Policy{Kind: PolicyKind(data[0] % 4)}
		// The top bits pick SMG's policies (seeds below 32 keep the first four).
		if extra := data[0] >> 5; extra >= 1 && extra <= 3 {
			policy.Kind = PolicyBoundedConsistentHashing + PolicyKind(extra)
		}
		if policy.Kind == PolicyManual {
			policy.AssignmentMode, policy.MaxKeys = AssignmentMode(data[1]&1), 3 // fewer than the keys routed
		}
		if policy.Kind == PolicyBoundedConsistentHashing {
			policy.MaxLoadSkew = []float64{0.5, 1, 1.25, 1.5, 2, 3}[data[1]%6] // below 1 too: no_eligible_candidate
			policy.MinLoadGap = int64(data[1] / 6 % 4)
		}
		// The options are set for every policy: the others must ignore them.
		if data[0]&4 != 0 {
			policy.SpillTarget = SpillLeastLoaded
		}
		const memoryCapacity = 3 // fewer than the keys routed: evictions happen
		if data[0]&8 != 0 {
			policy.KeyMemory = memoryCapacity
		}
		policy.BalanceBy = LoadMeasure(data[1] >> 5 & 1)
		weighted := data[0]&16 != 0
		weightOf := func(arg byte) int64 {
			if !weighted {
				return 1
			}
			return int64(arg%5) + 1
		}
		// Prefix blocks ride along on keyed requests; no policy reads them yet, so they must
		// change nothing.
		prefixBlocksOf := func(arg byte) []uint64 {
			blocks := make([]uint64, arg%4)
			for i := range blocks {
				blocks[i] = uint64(arg)<<56 | uint64(i)
			}
			return blocks
		}
		vnodes := []int{1, 2, 10, 40}[data[1]>>6]
		r, err := NewRouter(Config{WorkerURLs: pool[:4], Policy: policy, VirtualNodes: vnodes})
		if err != nil {
			if policy.MaxLoadSkew < 1 && policy.Kind == PolicyBoundedConsistentHashing {
				// Validate refuses it; build the policy directly as the Go tests do.
				valid := policy
				valid.MaxLoadSkew = 1
				r, err = NewRouter(Config{WorkerURLs: pool[:4], Policy: valid, VirtualNodes: vnodes})
				if err != nil {
					t.Fatal(err)
				}
				r.policy = policy
			} else {
				t.Fatal(err)
			}
		}

		type held struct {
			id      LeaseID
			worker  *worker
			weight  int64
			started bool // past its first token
		}
		var leases []held
		var released []LeaseID
		every := map[*worker]bool{}
		abandoned := uint64(0)
		note := func(d Decision, routed bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, w := range r.members.workers {
				every[w] = true
			}
			if d.Lease != 0 {
				s := r.leases.lookup(d.Lease)
				if s == nil {
					t.Fatalf("lease %#x of %+v is not active", d.Lease, d)
				}
				leases = append(leases, held{d.Lease, s.worker, s.weight, false})
			}
			if !routed {
				return
			}
			if d.Branch.ChoseWorker() != (d.Lease != 0) {
				t.Fatalf("decision %+v", d)
			}
			if d.Lease != 0 {
				w, ok := r.members.lookup(d.WorkerURL)
				if !ok || !w.healthy || w.id != d.WorkerID {
					t.Fatalf("chose %s, not an available member", d.WorkerURL)
				}
				if p, ok := r.members.lookup(d.PreferredURL); !ok || !p.healthy {
					t.Fatalf("preferred %s is not an available member", d.PreferredURL)
				}
				offPreferred := d.Branch == BranchExplicitRoutingKeySpillover || d.Branch == BranchExplicitRoutingKeyRemembered
				if (d.WorkerURL != d.PreferredURL) != offPreferred {
					t.Fatalf("worker and preferred differ without a spill or a remembered worker (or the reverse): %+v", d)
				}
				if d.Branch == BranchExplicitRoutingKeyRemembered && policy.KeyMemory == 0 {
					t.Fatalf("remembered without key memory: %+v", d)
				}
			}
		}
		// At most 256 calls per input, so that one execution stays cheap however long the
		// fuzzer makes its inputs.
		for i := 2; i+1 < len(data) && i < 2+2*256; i += 2 {
			op, arg := data[i], data[i+1]
			url := pool[int(arg)%len(pool)]
			switch op >> 4 {
			case 0, 1, 2: // route an explicit key (few keys, so loads pile up)
				req := Request{RoutingKey: []byte("key-" + strconv.Itoa(int(op&0x0f)%5)), Weight: weightOf(arg), PrefixBlocks: prefixBlocksOf(arg)}
				note(r.Route(&req), true)
			case 3: // route from headers
				names := []string{HeaderTargetWorker, HeaderRoutingKey, HeaderAuthorization, HeaderForwardedFor, HeaderCookie, "Other"}
				values := []string{"", "0", "+1", "3", "9", "k1", "k2", "bad\x01"}
				req := RequestFromHeaders(headers(names[int(op&0x0f)%6], values[int(arg)%8], names[int(arg>>3)%6], values[int(arg>>5)]))
				d := r.Route(&req)
				note(d, true)
			case 4: // no inputs
				var req Request
				note(r.Route(&req), true)
			case 5: // acquire
				id, _, err := r.AcquireWeighted(url, []byte("acq"), weightOf(arg))
				if err == nil {
					note(Decision{Lease: id}, false)
				}
			case 6, 7: // release (op 7: as abandoned)
				if len(leases) > 0 {
					j := int(arg) % len(leases)
					h := leases[j]
					leases = append(leases[:j], leases[j+1:]...)
					if !r.Release(h.id, op>>4 == 7) {
						t.Fatalf("release of held lease %#x did nothing", h.id)
					}
					if op>>4 == 7 {
						abandoned++
					}
					released = append(released, h.id)
				}
			case 8: // release again: a no-op
				if len(released) > 0 && r.Release(released[int(arg)%len(released)], false) {
					t.Fatal("a second release released")
				}
			case 9:
				_ = r.AddWorker(url)
			case 10:
				_ = r.RemoveWorker(url)
			case 11: // set workers from a bit mask
				var next []string
				for b := 0; b < len(pool); b++ {
					if arg&(1<<b) != 0 {
						next = append(next, pool[b])
					}
				}
				if err := r.SetWorkers(next); err != nil {
					t.Fatal(err)
				}
			case 12: // the first token of a held lease, once
				if len(leases) > 0 {
					h := &leases[int(arg)%len(leases)]
					if r.FirstToken(h.id) == h.started {
						t.Fatalf("first token of lease %#x (marked before: %v)", h.id, h.started)
					}
					h.started = true
				}
			case 15: // a batch of three requests, all or nothing; arg's top bit makes the last one invalid
				invalid := arg&0x80 != 0
				var batch []Decision
				err := r.RouteRequests(3, func(i int, req *Request) error {
					*req = Request{RoutingKey: []byte("key-" + strconv.Itoa((int(op)+i)%5)), Weight: weightOf(arg + byte(i)), PrefixBlocks: prefixBlocksOf(arg + byte(i))}
					if invalid && i == 2 {
						req.Weight = -int64(arg)
					}
					return nil
				}, func(_ int, d Decision) { batch = append(batch, d) })
				if (err != nil) != invalid || (invalid && len(batch) > 0) {
					t.Fatalf("batch (last invalid: %v): error %v, %d decisions", invalid, err, len(batch))
				}
				for _, d := range batch {
					note(d, true)
				}
			default:
				_ = r.SetHealthy(url, arg&0x80 == 0)
			}
			note(Decision{}, false)
			checkInvariants(t, r)
			// Each worker's load is the weight of the leases held on it, its requests their number.
			want, requests, prefill := map[*worker]int64{}, map[*worker]int64{}, map[*worker]int64{}
			for _, h := range leases {
				want[h.worker] += h.weight
				requests[h.worker]++
				if !h.started {
					prefill[h.worker] += h.weight
				}
			}
			r.mu.Lock()
			for w := range every {
				if w.load != want[w] || w.requests != requests[w] || w.prefillLoad != prefill[w] {
					r.mu.Unlock()
					t.Fatalf("worker %s (removed %v) has load %d, %d requests and prefill load %d; leases held weigh %d, number %d, %d before their first token",
						w.url, w.removed, w.load, w.requests, w.prefillLoad, want[w], requests[w], prefill[w])
				}
			}
			checkKeyMemory(t, r, policy)
			r.mu.Unlock()
			if got := r.Stats().ActiveLeases; got != len(leases) {
				t.Fatalf("%d active leases, %d held", got, len(leases))
			}
		}
		for _, h := range leases {
			if !r.Release(h.id, false) {
				t.Fatalf("final release of %#x did nothing", h.id)
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for w := range every {
			if w.load != 0 || w.activeKeys != 0 || w.prefillLoad != 0 || w.prefillRequests != 0 {
				t.Fatalf("worker %s left with load %d, %d keys", w.url, w.load, w.activeKeys)
			}
		}
		if r.leases.active != 0 || r.leaked != abandoned || r.view.spillableLoad != 0 {
			t.Fatalf("active %d, leaked %d (want %d), available load %d", r.leases.active, r.leaked, abandoned, r.view.spillableLoad)
		}
	})
}

// checkKeyMemory checks that the memory exists exactly when the policy has one, holds at most
// its capacity, and recalls only available members; the caller holds r.mu.
func checkKeyMemory(t *testing.T, r *Router, policy Policy) {
	t.Helper()
	m := r.view.memory
	capacity := policy.KeyMemory // manual holds its keys in the same memory
	if policy.Kind == PolicyManual {
		capacity = policy.MaxKeys
	} else if policy.Kind != PolicyBoundedConsistentHashing {
		capacity = 0
	}
	if (m != nil) != (capacity > 0) {
		t.Fatalf("key memory %v with policy %+v", m != nil, policy)
	}
	if m == nil {
		return
	}
	if m.len() > capacity {
		t.Fatalf("%d keys remembered, capacity %d", m.len(), capacity)
	}
	for _, e := range m.entries[1:] {
		if i := m.recall(e.position); i >= 0 {
			if w := r.members.workers[i]; w != e.worker || !w.healthy || w.removed {
				t.Fatalf("recalled %s (healthy %v, removed %v)", w.url, w.healthy, w.removed)
			}
		}
	}
}
