// Package health keeps a router's workers' availability up to date (contract: Worker
// failures): it probes them, ends their ejections when due and logs every change of condition.
// The state machines are the core's; this package brings the clock and the network.
package health

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/bounded-router/bounded-router/core"
)

// Options are what a Monitor needs besides its router; zero values take the real clock, the
// HTTP probe of the router's health check and the default logger.
type Options struct {
	Clock  Clock
	Prober Prober
	Logger *slog.Logger
}

// Monitor watches one router's workers. Its methods are safe for concurrent use.
type Monitor struct {
	router *core.Router
	clock  Clock
	probe  Prober
	cfg    core.HealthCheckConfig
	log    *slog.Logger

	mu        sync.Mutex
	stopped   bool
	expiry    Timer     // pending end of the earliest ejection
	due       time.Time // when expiry fires
	nextRound Timer     // pending round of probes
	// probes are the probes out, each under ctx, which Stop cancels before it waits for them.
	probes sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
	// probing are the workers whose probe is still out (a hung worker is not probed twice), by
	// id: a worker added again under the same URL is another worker.
	probing map[uint32]bool
	// subscribers are told every change after it is logged (see Subscribe), by subscription.
	subscribers map[int]func(core.ConditionChange)
	subscribed  int
}

// Subscribe adds a function told about every change of a worker's condition, after the
// monitor has logged it; the gateway uses it to send the requests still waiting on a worker
// that stopped being routable to another. The returned function ends the subscription.
func (m *Monitor) Subscribe(fn func(core.ConditionChange)) (unsubscribe func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subscribed++
	id := m.subscribed
	m.subscribers[id] = fn
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.subscribers, id)
	}
}

// New attaches a monitor to a router: it becomes the router's condition listener. Call Start to
// run the probes (when the router has a health check) and Stop when the router is closed.
func New(r *core.Router, opts Options) *Monitor {
	m := &Monitor{router: r, clock: opts.Clock, probe: opts.Prober, cfg: r.HealthCheck(), log: opts.Logger, probing: map[uint32]bool{}, subscribers: map[int]func(core.ConditionChange){}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if m.clock == nil {
		m.clock = SystemClock
	}
	if m.probe == nil {
		m.probe = HTTPProber(m.cfg.Endpoint)
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	r.OnConditionChange(m.changed)
	return m
}

// Router is the monitored router.
func (m *Monitor) Router() *core.Router { return m.router }

// Finish releases a lease and records its request's outcome at the monitor's time.
func (m *Monitor) Finish(id core.LeaseID, o core.Outcome) bool {
	return m.router.Finish(id, o, m.clock.Now())
}

// Start runs the probes when the router has a health check: a round now, then one every
// interval on the monitor's clock. It returns at once.
func (m *Monitor) Start() {
	if !m.cfg.Disabled {
		m.round()
	}
}

// Stop ends the rounds of probes and the pending ejection timer, and cancels the probes out
// and waits for them to return.
func (m *Monitor) Stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	for _, t := range []Timer{m.expiry, m.nextRound} {
		if t != nil {
			t.Stop()
		}
	}
	m.mu.Unlock()
	m.cancel()
	m.probes.Wait()
}

// Stopped tells whether Stop was called.
func (m *Monitor) Stopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

// round starts a round of probes without waiting for them, so a hung worker holds no other
// worker's probes, and schedules the next one.
func (m *Monitor) round() {
	m.startProbes(nil)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.stopped {
		m.nextRound = m.clock.AfterFunc(m.cfg.Interval, m.round)
	}
}

// ProbeOnce probes every member whose last probe has returned and waits for these probes.
func (m *Monitor) ProbeOnce() {
	var these sync.WaitGroup
	m.startProbes(&these)
	these.Wait()
}

// startProbes probes every member whose last probe has returned, each within the health
// check's timeout and in its own goroutine, and reports each result to the router as it comes;
// these (when given) counts them too.
func (m *Monitor) startProbes(these *sync.WaitGroup) {
	for _, w := range m.router.Workers() {
		if !m.startProbe(w.ID, these) {
			continue
		}
		go func(url string, id uint32) {
			defer m.probes.Done()
			if these != nil {
				defer these.Done()
			}
			ctx, cancel := context.WithTimeout(m.ctx, m.cfg.Timeout)
			err := m.probe(ctx, url)
			cancel()
			m.endProbe(id)
			if m.ctx.Err() != nil {
				return // cut short by Stop: says nothing of the worker
			}
			// A worker removed meanwhile (even if added again since) is no longer the router's:
			// nothing to report.
			_ = m.router.ReportProbe(url, id, err == nil)
		}(w.URL, w.ID)
	}
}

// startProbe marks the worker's probe out, unless one is out already or the monitor stopped;
// under the lock Stop takes, so that no probe starts once Stop waits for them.
func (m *Monitor) startProbe(id uint32, these *sync.WaitGroup) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.probing[id] || m.stopped {
		return false
	}
	m.probing[id] = true
	m.probes.Add(1)
	if these != nil {
		these.Add(1)
	}
	return true
}

func (m *Monitor) endProbe(id uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.probing, id)
}

// changed is the router's condition listener: it logs every change of condition at WARNING (a
// worker turning suspect or trusted again, or removed, at DEBUG) and schedules the end of an
// ejection.
func (m *Monitor) changed(c core.ConditionChange) {
	if c.Removed {
		m.log.Debug("bounded-router: worker removed", "worker", c.URL, "condition", c.From.String())
	} else if c.From == c.To {
		m.log.Debug("bounded-router: worker failures in a row", "worker", c.URL, "condition", c.To.String(), "consecutive_failures", c.Failures)
	} else {
		attrs := []any{"worker", c.URL, "from", c.From.String(), "to", c.To.String()}
		if c.To == core.ConditionEjected {
			attrs = append(attrs, "until", c.Until.Format(time.RFC3339Nano))
			m.scheduleExpiry(c.Until)
		}
		m.log.Warn("bounded-router: worker condition changed", attrs...)
	}
	m.mu.Lock()
	subscribers := make([]func(core.ConditionChange), 0, len(m.subscribers))
	for _, fn := range m.subscribers {
		subscribers = append(subscribers, fn)
	}
	m.mu.Unlock()
	for _, fn := range subscribers {
		fn(c)
	}
}

// scheduleExpiry makes sure the router's ejections are looked at by until.
func (m *Monitor) scheduleExpiry(until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || (m.expiry != nil && !m.due.After(until)) {
		return
	}
	if m.expiry != nil {
		m.expiry.Stop()
	}
	m.due = until
	m.expiry = m.clock.AfterFunc(until.Sub(m.clock.Now()), m.expire)
}

func (m *Monitor) expire() {
	m.mu.Lock()
	m.expiry = nil
	m.mu.Unlock()
	if next := m.router.ExpireEjections(m.clock.Now()); !next.IsZero() {
		m.scheduleExpiry(next)
	}
}
