package core

// LoadMeasure is the load the bound of bounded_consistent_hashing and cache_aware weighs
// (docs/contract.md, "Prefill load"): a policy's balance_by setting.
type LoadMeasure uint8

const (
	// LoadInFlight weighs every lease from route to release: the contract's default rules.
	LoadInFlight LoadMeasure = iota
	// LoadPrefill weighs only the leases that have not seen their first token (the worker's
	// prefill queue); ties among least loaded workers go to the fewest leases in flight.
	LoadPrefill
)

var loadMeasureNames = [...]string{LoadInFlight: "in_flight", LoadPrefill: "prefill"}

func (m LoadMeasure) String() string {
	if int(m) < len(loadMeasureNames) {
		return loadMeasureNames[m]
	}
	return "unknown_load_measure"
}

// LoadMeasureNames are the names of the load measures, in the order of their values.
func LoadMeasureNames() []string { return loadMeasureNames[:] }

// measured is the worker's load as m counts it.
func (w *worker) measured(m LoadMeasure) int64 {
	if m == LoadPrefill {
		return w.prefillLoad
	}
	return w.load
}

// rank orders workers for a least-loaded choice: by the measured load, then, under LoadPrefill,
// by the leases in flight (a worker decoding fewer answers starts a new prompt sooner).
type rank struct{ load, requests int64 }

func (w *worker) rank(m LoadMeasure) rank {
	if m == LoadPrefill {
		return rank{w.prefillLoad, w.requests}
	}
	return rank{load: w.load}
}

func (a rank) less(b rank) bool {
	return a.load < b.load || a.load == b.load && a.requests < b.requests
}
