package core

// Engine load reports (docs/contract.md, "Engine load reports"). A router replica counts only
// its own leases; the engine behind a worker counts every replica's requests. While a report
// stands, a worker's routing load is
//
//	the engine's last report + the weights of this process's leases taken since that report
//
// A lease taken before the report is in the report (the engine was running or queueing it), so
// it leaves the sum only when a later report no longer counts it; a lease taken since is in the
// second term alone, and leaves it when released. Nothing is counted twice. Without a report
// the routing load is this process's leases, as before.

// MaxEngineLoad bounds a reported load, so that no sum of loads can overflow.
const MaxEngineLoad = 1 << 40

// ReportLoad records the load the engine of worker url reports (its requests running and
// waiting): the worker's routing load becomes load, plus the leases taken from now on.
func (r *Router) ReportLoad(url string, load int64) error {
	if load < 0 || load > MaxEngineLoad {
		return invalid("engine load must be from 0 to %d, got %d", int64(MaxEngineLoad), load)
	}
	return r.changeWorker(url, func(w *worker) {
		w.reports++
		w.reported = true
		r.addLoad(w, load-w.load)
	})
}

// ForgetLoad drops the worker's standing report (it expired, or the engine stopped answering):
// its routing load is again this process's leases alone. Nothing when no report stands.
func (r *Router) ForgetLoad(url string) error {
	return r.changeWorker(url, func(w *worker) {
		if w.reported {
			w.reported = false
			r.addLoad(w, w.held-w.load)
		}
	})
}
