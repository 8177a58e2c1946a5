package gateway

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/bounded-router/bounded-router/core"
)

// errWorkerDown cancels a try whose worker stopped being routable before it answered.
var errWorkerDown = errors.New("the worker stopped being routable before it answered")

// waiting keeps the tries that wait for a worker's response headers, so that those on a worker
// that stops being routable (hung and failing its probes, ejected, set unhealthy) are sent to
// another worker at once instead of waiting out first_byte_timeout (contract: Worker failures,
// "Where a retry goes"). Nothing has reached their clients yet. A try is added and removed in
// constant time; only a worker going down, which is rare, looks through them all.
type waiting struct {
	mu    sync.Mutex
	tries map[*exchange]waitingTry
	// downs counts the workers that stopped being routable: a try whose worker was chosen
	// before a change it was not yet here to hear checks that worker itself (wentDownSince).
	downs atomic.Uint64
}

type waitingTry struct {
	worker uint32
	cancel *canceller
}

func (w *waiting) add(worker uint32, ex *exchange, cancel *canceller) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tries == nil {
		w.tries = map[*exchange]waitingTry{}
	}
	w.tries[ex] = waitingTry{worker, cancel}
}

func (w *waiting) remove(ex *exchange) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.tries, ex)
}

// workerChanged is the gateway's subscription to its monitor: a worker that stops being
// routable (or is removed) has its waiting tries cancelled, and the failover loop sends them
// elsewhere.
func (w *waiting) workerChanged(c core.ConditionChange) {
	if !c.StoppedRouting() {
		return
	}
	w.downs.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for ex, try := range w.tries {
		if try.worker == c.ID {
			try.cancel.cancel(errWorkerDown)
			delete(w.tries, ex)
		}
	}
}

// wentDownSince tells whether worker is no longer routable, when some worker stopped being
// routable since downs was seen (the router is asked only then: rarely).
func (g *Gateway) wentDownSince(worker uint32, seen uint64) bool {
	if g.waiting.downs.Load() == seen {
		return false
	}
	for _, s := range g.router.Workers() {
		if s.ID == worker {
			return !s.Condition.Routable()
		}
	}
	return true // removed
}
