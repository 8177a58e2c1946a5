package core

// Engine load reports (docs/contract.md, "Engine load reports"). A router replica counts only
// its own leases; the engine behind a worker counts every replica's requests. While a report
// stands, a worker's routing load and routing prefill load are
//
//	the engine's last figure + the weights of this process's leases taken since that report
//	                           (for the prefill load: those not yet past their first token)
//
// A lease taken before the report is in the report (the engine was running or queueing it), so
// it leaves the sum only when a later report no longer counts it: its release, and its first
// token, change nothing. A lease taken since is in the second term alone: it adds its weight
// when taken and takes it away when released (and, for the prefill load, at its first token,
// or at its release if it never had one). Nothing is counted twice. Without a report the
// routing loads are this process's leases, as before.

// MaxEngineLoad bounds a reported figure, so that no sum of loads can overflow.
const MaxEngineLoad = 1 << 40

// Unreported marks a figure an engine load report does not carry.
const Unreported = -1

// EngineLoad is one report of a worker's engine; a figure of Unreported is not in it.
type EngineLoad struct {
	// Requests is the engine's requests running and waiting: the in-flight routing load.
	Requests int64
	// Waiting is the engine's prefill queue in the unit of this router's lease weights (its
	// requests waiting with unit weights; their prompt tokens with token weights).
	Waiting int64
	// WaitingRequests is the number of requests waiting, for an engine that reports no
	// Waiting: the prefill figure is then WaitingRequests times the mean weight of this router's
	// leases held (1 when it holds none).
	WaitingRequests int64
}

// RequestsReport is the report of an engine that gives its requests running and waiting alone.
func RequestsReport(requests int64) EngineLoad {
	return EngineLoad{Requests: requests, Waiting: Unreported, WaitingRequests: Unreported}
}

func (e EngineLoad) check() error {
	for _, f := range [...]struct {
		name  string
		value int64
	}{{"engine load", e.Requests}, {"engine waiting", e.Waiting}, {"engine waiting requests", e.WaitingRequests}} {
		if f.value != Unreported && (f.value < 0 || f.value > MaxEngineLoad) {
			return invalid("%s must be from 0 to %d (or %d, unreported), got %d", f.name, int64(MaxEngineLoad), int64(Unreported), f.value)
		}
	}
	return nil
}

// ReportLoad records what the engine of worker url reports. The report replaces the standing
// one whole: a figure it does not carry is this process's leases again (as ForgetLoad).
func (r *Router) ReportLoad(url string, e EngineLoad) error {
	if err := e.check(); err != nil {
		return err
	}
	return r.changeWorker(url, func(w *worker) {
		w.reports++      // every lease held is now one taken before the standing report
		w.peerWeight = 0 // and every peer route is in the report
		w.reported, w.prefillReported = e.Requests != Unreported, false
		requests := w.held
		if w.reported {
			requests = e.Requests
		}
		r.addLoad(w, requests-w.load)
		waiting := r.waitingWeight(e)
		if waiting == Unreported {
			waiting = w.prefillHeld
		} else {
			w.prefillReported = true
		}
		r.addPrefillLoad(w, waiting-w.prefillLoad)
	})
}

// waitingWeight is the report's prefill figure in lease weights, or Unreported; r.mu is held.
func (r *Router) waitingWeight(e EngineLoad) int64 {
	if e.Waiting != Unreported || e.WaitingRequests == Unreported {
		return e.Waiting
	}
	mean := int64(1)
	if r.leases.active > 0 {
		mean = r.heldWeight / int64(r.leases.active)
	}
	if e.WaitingRequests > MaxEngineLoad/mean {
		return MaxEngineLoad
	}
	return e.WaitingRequests * mean
}

// ForgetLoad drops the worker's standing report (it expired, or the engine stopped answering):
// its routing loads are again this process's leases alone. Nothing when no report stands.
func (r *Router) ForgetLoad(url string) error {
	return r.changeWorker(url, func(w *worker) {
		w.peerWeight = 0
		if w.reported {
			w.reported = false
			r.addLoad(w, w.held-w.load)
		}
		if w.prefillReported {
			w.prefillReported = false
			r.addPrefillLoad(w, w.prefillHeld-w.prefillLoad)
		}
	})
}
