package gateway

import (
	"context"
	"errors"
	"sync"

	"github.com/bounded-router/bounded-router/core"
)

// errWorkerDown cancels a try whose worker stopped being routable before it answered.
var errWorkerDown = errors.New("the worker stopped being routable before it answered")

// waiting keeps the tries that wait for a worker's response headers, by worker, so that those
// on a worker that stops being routable (hung and failing its probes, ejected, set unhealthy)
// are sent to another worker at once instead of waiting out first_byte_timeout (contract: Worker
// failures, "Where a retry goes"). Nothing has reached their clients yet.
type waiting struct {
	mu    sync.Mutex
	tries map[uint32]map[*exchange]context.CancelCauseFunc
}

func (w *waiting) add(worker uint32, ex *exchange, cancel context.CancelCauseFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tries == nil {
		w.tries = map[uint32]map[*exchange]context.CancelCauseFunc{}
	}
	on := w.tries[worker]
	if on == nil {
		on = map[*exchange]context.CancelCauseFunc{}
		w.tries[worker] = on
	}
	on[ex] = cancel
}

func (w *waiting) remove(worker uint32, ex *exchange) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on := w.tries[worker]; on != nil {
		delete(on, ex)
		if len(on) == 0 {
			delete(w.tries, worker)
		}
	}
}

// workerChanged is the gateway's subscription to its monitor: a worker that stops being
// routable has its waiting tries cancelled, and the failover loop sends them elsewhere.
func (w *waiting) workerChanged(c core.ConditionChange) {
	if !c.From.Routable() || c.To.Routable() {
		return
	}
	w.mu.Lock()
	on := w.tries[c.ID]
	delete(w.tries, c.ID)
	w.mu.Unlock()
	for _, cancel := range on {
		cancel(errWorkerDown)
	}
}
