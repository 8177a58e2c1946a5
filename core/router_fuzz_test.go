package core

import (
	"strconv"
	"testing"
)

// FuzzRouterOperations runs any sequence of calls on the core API (decoded from the input,
// two bytes per call) and checks after every call that the router's bookkeeping is intact,
// that every decision is one the policy may make, and that each worker's load is exactly the
// number of leases held on it; at the end every lease is released exactly once and every
// load and key count, on members and on removed workers, is back to zero.
func FuzzRouterOperations(f *testing.F) {
	f.Add([]byte{3, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5})
	f.Add([]byte{3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0})
	f.Add([]byte{0, 0, 0x11, 0, 0x15, 0, 0x24, 0, 0x30, 0, 0x44, 0, 0x50, 0x0f})
	f.Add([]byte{1, 5, 0x60, 1, 0x61, 2, 0x70, 0, 0x80, 3, 0x90, 0, 0xa0, 1, 0xb0, 0, 0xc0, 0})
	f.Add([]byte{2, 1, 0x30, 0x00, 0x33, 0x3f, 0x40, 1, 0x42, 0, 0x00, 0, 0x00, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		pool := workerURLs(6)
		policy := Policy{Kind: PolicyKind(data[0] % 4)}
		if policy.Kind == PolicyBoundedConsistentHashing {
			policy.MaxLoadSkew = []float64{0.5, 1, 1.25, 1.5, 2, 3}[data[1]%6] // below 1 too: no_eligible_candidate
			policy.MinLoadGap = int64(data[1] / 6 % 4)
		}
		vnodes := []int{1, 2, 10, 40}[data[1]>>6]
		r, err := NewRouter(Config{WorkerURLs: pool[:4], Policy: policy, VirtualNodes: vnodes})
		if err != nil {
			if policy.MaxLoadSkew < 1 && policy.Kind == PolicyBoundedConsistentHashing {
				// Validate refuses it; build the policy directly as the Go tests do.
				r, err = NewRouter(Config{WorkerURLs: pool[:4], Policy: Policy{Kind: policy.Kind, MaxLoadSkew: 1, MinLoadGap: policy.MinLoadGap}, VirtualNodes: vnodes})
				if err != nil {
					t.Fatal(err)
				}
				r.policy = policy
			} else {
				t.Fatal(err)
			}
		}

		type held struct {
			id     LeaseID
			worker *worker
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
				leases = append(leases, held{d.Lease, s.worker})
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
				if (d.WorkerURL != d.PreferredURL) != (d.Branch == BranchExplicitRoutingKeySpillover) {
					t.Fatalf("worker and preferred differ without a spill (or the reverse): %+v", d)
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
				d := route(r, "key-"+strconv.Itoa(int(op&0x0f)%5))
				note(d, true)
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
				id, _, err := r.Acquire(url, []byte("acq"))
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
			default:
				_ = r.SetHealthy(url, arg&0x80 == 0)
			}
			note(Decision{}, false)
			checkInvariants(t, r)
			// Each worker's load is the number of leases held on it.
			want := map[*worker]int64{}
			for _, h := range leases {
				want[h.worker]++
			}
			r.mu.Lock()
			for w := range every {
				if w.load != want[w] || w.load < 0 {
					r.mu.Unlock()
					t.Fatalf("worker %s (removed %v) has load %d, %d leases held", w.url, w.removed, w.load, want[w])
				}
			}
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
			if w.load != 0 || w.activeKeys != 0 {
				t.Fatalf("worker %s left with load %d, %d keys", w.url, w.load, w.activeKeys)
			}
		}
		if r.leases.active != 0 || r.leaked != abandoned || r.view.availableLoad != 0 {
			t.Fatalf("active %d, leaked %d (want %d), available load %d", r.leases.active, r.leaked, abandoned, r.view.availableLoad)
		}
	})
}
