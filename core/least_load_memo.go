package core

import "math"

// leastLoadMemo remembers the least load of the spillable workers (contract: Worker failures),
// in-flight or prefill (the view keeps one of each), so that the spill test and the
// least-loaded choices read it instead of scanning every worker.
// A load change updates it in constant time; a health, trust or membership change forgets it.
//
// Invariant: every spillable worker carries at least load, and exactly count of them carry
// load; none before membership index at carries it (the first that does is at or after it).
// count 0 says that no spillable worker carries load (the least is unknown, and above load):
// the next read scans, unless a load change comes down to load or below first, which makes it
// known again.
type leastLoadMemo struct {
	load  int64
	count int
	at    int
}

// forget makes the memo unknown, after a health or membership change.
func (m *leastLoadMemo) forget() { *m = leastLoadMemo{load: math.MinInt64} }

// moved updates the memo for the spillable worker at membership index i, whose load went from
// old to load (they differ: a lease weighs at least 1).
func (m *leastLoadMemo) moved(i int, old, load int64) {
	switch {
	case load < m.load || load == m.load && m.count == 0:
		m.load, m.count, m.at = load, 1, i
	case load == m.load:
		m.count++
		m.at = min(m.at, i)
	case old == m.load && m.count > 0:
		m.count-- // at stays a bound: the first worker carrying load is still at or after it
	}
}
