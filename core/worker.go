package core

// worker is one backend worker as the router tracks it. A worker that is removed and added
// again under the same URL is a new worker: leases taken on the old one never touch it.
// Every field but url and id is guarded by the router's lock.
type worker struct {
	url string
	id  uint32
	// healthy workers are available: they can be chosen and they count in statistics. It is
	// userHealthy (set_healthy) and the probes' and the breaker's verdicts together (see
	// worker_health.go); spillable workers are those the spill targets and least loads come from.
	healthy, userHealthy, spillable bool
	probe                           probeState
	breaker                         breaker
	// routed counts the leases taken on the worker; outcomes counts how they ended; probes
	// counts its health-check probes, failed and passed.
	routed   uint64
	outcomes OutcomeCounts
	probes   ProbeCounts
	// removed is set once the worker has left the membership; its leases may still be released.
	removed bool
	// outages counts the times the worker stopped being available (turned unhealthy or left);
	// key memory forgets the keys remembered on it before the latest one.
	outages uint32
	// index is the worker's place in the current membership order, while it is a member.
	index int
	// held is the sum of the weights of the leases currently held on the worker (their number
	// when every weight is 1); requests is their number.
	held     int64
	requests int64
	// prefillHeld and prefillRequests are the weight and number of those leases not yet marked
	// as having seen their first token (Router.FirstToken): the worker's prefill queue.
	prefillHeld, prefillRequests int64
	// load and prefillLoad are what the policies compare: held and prefillHeld, or, while the
	// worker's engine has reported them, that report plus the leases taken since (engine_load.go).
	load, prefillLoad int64
	// reported and prefillReported are set while an engine's figure of the in-flight and of
	// the prefill load stands; reports counts the reports received.
	reported, prefillReported bool
	reports                   uint32
	// peerWeight is the weight of the peer routes recorded since the last report (peer_routes.go).
	peerWeight int64
	// activeKeys is the number of distinct explicit routing keys among the worker's leases
	// (the router's keyCounts counts the leases of each key).
	activeKeys int
	// blocks is the worker's part of cache_aware's block index; candidate stamps it as a
	// candidate of the decision being made (see blockIndex.epoch).
	blocks    workerBlocks
	candidate uint64
}

func newWorker(url string, id uint32) *worker {
	return &worker{url: url, id: id, healthy: true, userHealthy: true, spillable: true}
}

// WorkerState is a snapshot of one worker.
type WorkerState struct {
	URL     string `json:"url"`
	ID      uint32 `json:"id"`
	Healthy bool   `json:"healthy"`
	// Load is the sum of the weights of the leases held on the worker: their number when every
	// lease weighs 1.
	Load int64 `json:"load"`
	// Requests is the number of leases held on the worker, whatever their weights.
	Requests int64 `json:"requests"`
	// PrefillLoad is the sum of the weights of those leases that have not seen their first token
	// (docs/contract.md, "Prefill load"), PrefillRequests their number.
	PrefillLoad     int64 `json:"prefill_load"`
	PrefillRequests int64 `json:"prefill_requests"`
	// ActiveKeys is the number of distinct explicit routing keys among those leases.
	ActiveKeys int `json:"active_keys"`
	// IndexedBlocks is the number of prefix blocks cache_aware's index holds for the worker
	// (at most blocks_per_worker; 0 under the other policies).
	IndexedBlocks int `json:"indexed_blocks"`
	// Condition says why the worker is or is not available (contract: Worker failures), and
	// ConsecutiveFailures counts its failed requests since its last success.
	Condition           WorkerCondition `json:"condition"`
	ConsecutiveFailures int             `json:"consecutive_failures"`
	// Ejections counts the times its circuit breaker opened.
	Ejections uint64 `json:"ejections"`
	// Routed counts every lease taken on the worker, Outcomes how the released ones ended.
	Routed   uint64        `json:"routed"`
	Outcomes OutcomeCounts `json:"outcomes"`
	Probes   ProbeCounts   `json:"probes"`
}

func (w *worker) state() WorkerState {
	return WorkerState{URL: w.url, ID: w.id, Healthy: w.healthy, Load: w.held, Requests: w.requests, PrefillLoad: w.prefillHeld, PrefillRequests: w.prefillRequests, ActiveKeys: w.activeKeys, IndexedBlocks: len(w.blocks.nodes),
		Condition: w.condition(), ConsecutiveFailures: w.breaker.failures, Ejections: w.breaker.ejections, Routed: w.routed, Outcomes: w.outcomes, Probes: w.probes}
}
