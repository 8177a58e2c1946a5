package core

// membership is an immutable snapshot of the workers in the order they were added, with the
// ring built for exactly that set. Changing membership builds a new snapshot (copy-on-write),
// so routing never waits for a ring to be built.
type membership struct {
	workers []*worker
	urls    []string
	byURL   map[string]int
	ring    *ring
}

func newMembership(workers []*worker, r *ring) *membership {
	m := &membership{workers: workers, urls: make([]string, len(workers)), byURL: make(map[string]int, len(workers)), ring: r}
	for i, w := range workers {
		m.urls[i] = w.url
		m.byURL[w.url] = i
	}
	return m
}

// emptyMembership has no workers; the workers added to it are placed by hash.
func emptyMembership(hash HashRing) *membership { return newMembership(nil, &ring{hash: hash}) }

func (m *membership) lookup(url string) (*worker, bool) {
	i, ok := m.byURL[url]
	if !ok {
		return nil, false
	}
	return m.workers[i], true
}

// withWorker appends a worker, merging its virtual nodes (placed by the ring's hash) into the
// existing ring.
func (m *membership) withWorker(w *worker, virtualNodes int) *membership {
	workers := append(m.workers[:len(m.workers):len(m.workers)], w)
	urls := append(m.urls[:len(m.urls):len(m.urls)], w.url)
	return newMembership(workers, m.ring.withAppendedWorker(urls, virtualNodes))
}

// withoutWorker drops the worker at index i, filtering its virtual nodes out of the ring.
func (m *membership) withoutWorker(i int) *membership {
	workers := make([]*worker, 0, len(m.workers)-1)
	workers = append(append(workers, m.workers[:i]...), m.workers[i+1:]...)
	return newMembership(workers, m.ring.withoutWorker(uint32(i)))
}

// rebuilt is the membership of exactly these workers, with a ring built from scratch.
func rebuilt(workers []*worker, hash HashRing, virtualNodes int) *membership {
	m := newMembership(workers, nil)
	m.ring = buildRing(hash, m.urls, virtualNodes)
	return m
}
