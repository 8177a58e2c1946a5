package core

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// optionsModel is bounded_consistent_hashing with its options written out plainly from
// docs/contract.md, over the model ring and the loads the router reports: the router must make
// the same decision for every request of a random sequence.
type optionsModel struct {
	policy  Policy
	members []string
	ring    *refRing
	// incarnation of a URL grows at each of its outages (unhealthy, removed): a remembered
	// worker counts only in the incarnation it was remembered in.
	incarnation map[string]int
	recent      []string // remembered keys, least recent first
	last        map[string]memoryModelEntry
}

type memoryModelEntry struct {
	url         string
	incarnation int
}

func (m *optionsModel) decide(key string, states []WorkerState) (string, Branch) {
	load, up := map[string]int64{}, map[string]bool{}
	var total, least int64 = 0, -1
	n := 0
	for _, s := range states {
		load[s.URL], up[s.URL] = s.Load, s.Healthy
		if s.Healthy {
			total += s.Load
			n++
			if least < 0 || s.Load < least {
				least = s.Load
			}
		}
	}
	if n == 0 {
		return "", BranchNoHealthyWorkers
	}
	bound := float64(total) / float64(n) * m.policy.MaxLoadSkew
	overloaded := func(u string) bool { return load[u]-least > m.policy.MinLoadGap && float64(load[u]) > bound }
	order := m.ring.order([]byte(key))
	preferred := order[slices.IndexFunc(order, func(u string) bool { return up[u] })]
	if e, ok := m.last[key]; ok && up[e.url] && m.incarnation[e.url] == e.incarnation && e.url != preferred && !overloaded(e.url) {
		return e.url, BranchExplicitRoutingKeyRemembered
	}
	if !overloaded(preferred) {
		return preferred, BranchExplicitRoutingKeyHit
	}
	target := ""
	for _, u := range order {
		eligible := up[u] && float64(load[u]) <= bound
		if eligible && (target == "" || m.policy.SpillTarget == SpillLeastLoaded && load[u] < load[target]) {
			target = u
		}
	}
	if target == "" {
		return preferred, BranchExplicitRoutingKeyNoEligibleCandidate
	}
	return target, BranchExplicitRoutingKeySpillover
}

func (m *optionsModel) remember(key, url string) {
	if m.policy.KeyMemory == 0 {
		return
	}
	if i := slices.Index(m.recent, key); i >= 0 {
		m.recent = slices.Delete(m.recent, i, i+1)
	} else if len(m.recent) == m.policy.KeyMemory {
		delete(m.last, m.recent[0])
		m.recent = m.recent[1:]
	}
	m.recent = append(m.recent, key)
	m.last[key] = memoryModelEntry{url, m.incarnation[url]}
}

func (m *optionsModel) setMembers(urls []string) {
	for _, u := range m.members {
		if !slices.Contains(urls, u) {
			m.incarnation[u]++
		}
	}
	m.members = slices.Clone(urls)
	m.ring = newRefRing(urls, DefaultVirtualNodes)
}

func TestBoundedOptionsMatchAModel(t *testing.T) {
	pool := workerURLs(5)
	for _, target := range []SpillTarget{SpillClockwise, SpillLeastLoaded} {
		for _, memory := range []int{0, 1, 4} {
			policy := memoryPolicy(1.25, 3, memory)
			policy.SpillTarget = target
			rng := rand.New(rand.NewPCG(uint64(memory), uint64(target)))
			r := newTestRouter(t, policy, pool[:4])
			m := &optionsModel{policy: policy, incarnation: map[string]int{}, last: map[string]memoryModelEntry{}}
			m.setMembers(pool[:4])
			var held []LeaseID
			branches := map[Branch]int{}
			for step := 0; step < 3000; step++ {
				switch op := rng.IntN(20); {
				case op < 10:
					key := "k" + strconv.Itoa(rng.IntN(8))
					wantURL, wantBranch := m.decide(key, r.Workers())
					req := Request{RoutingKey: []byte(key), Weight: int64(1 + rng.IntN(3))}
					d := r.Route(&req)
					require.Equal(t, wantBranch, d.Branch, "%v memory %d step %d key %s", target, memory, step, key)
					require.Equal(t, wantURL, d.WorkerURL, "%v memory %d step %d key %s", target, memory, step, key)
					branches[d.Branch]++
					if d.Lease != 0 {
						held = append(held, d.Lease)
						m.remember(key, d.WorkerURL)
					}
				case op < 17 && len(held) > 0:
					i := rng.IntN(len(held))
					r.Release(held[i], false)
					held = slices.Delete(held, i, i+1)
				case op == 17:
					u := m.members[rng.IntN(len(m.members))]
					healthy := rng.IntN(3) > 0
					if !healthy && r.Workers()[slices.Index(m.members, u)].Healthy {
						m.incarnation[u]++
					}
					require.NoError(t, r.SetHealthy(u, healthy))
				case op == 18 && len(m.members) > 1:
					u := m.members[rng.IntN(len(m.members))]
					require.NoError(t, r.RemoveWorker(u))
					m.setMembers(slices.DeleteFunc(slices.Clone(m.members), func(v string) bool { return v == u }))
				case op == 19:
					if u := pool[rng.IntN(len(pool))]; !slices.Contains(m.members, u) {
						require.NoError(t, r.AddWorker(u))
						m.setMembers(append(slices.Clone(m.members), u))
					}
				}
			}
			require.Greater(t, branches[BranchExplicitRoutingKeySpillover], 20, "%v memory %d: %v", target, memory, branches)
			if memory > 0 {
				require.Greater(t, branches[BranchExplicitRoutingKeyRemembered], 20, "%v memory %d: %v", target, memory, branches)
			}
		}
	}
}

// The options under concurrent routes, releases and membership churn (run with -race): every
// load and request count returns to zero and the memory stays consistent.
func TestBoundedOptionsUnderConcurrentChurn(t *testing.T) {
	pool := workerURLs(6)
	policy := memoryPolicy(1.25, 4, 16)
	policy.SpillTarget = SpillLeastLoaded
	r := newTestRouter(t, policy, pool[:4])
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // churn
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for !stopped(stop) {
			u := pool[rng.IntN(len(pool))]
			switch rng.IntN(3) {
			case 0:
				_ = r.SetHealthy(u, rng.IntN(2) == 0)
			case 1:
				_ = r.RemoveWorker(u)
			default:
				_ = r.AddWorker(u)
			}
		}
	}()
	var routers sync.WaitGroup
	for g := range 4 {
		routers.Add(1)
		go func() {
			defer routers.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			var held []LeaseID
			for i := 0; i < 3000; i++ {
				req := Request{RoutingKey: []byte("k" + strconv.Itoa(rng.IntN(40))), Weight: int64(1 + rng.IntN(100))}
				if d := r.Route(&req); d.Lease != 0 {
					held = append(held, d.Lease)
				}
				if len(held) > 8 {
					r.Release(held[0], false)
					held = held[1:]
				}
			}
			r.ReleaseMany(held)
		}()
	}
	routers.Wait()
	close(stop)
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.members.workers {
		require.Zero(t, w.load, w.url)
		require.Zero(t, w.requests, w.url)
	}
	require.Zero(t, r.view.spillableLoad)
	checkKeyMemory(t, r, policy)
}
