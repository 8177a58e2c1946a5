package health

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bounded-router/bounded-router/core"
)

// fakeClock runs AfterFunc callbacks when Advance passes their time, in the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	rest := c.timers[:0]
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			due = append(due, t)
		} else if !t.stopped {
			rest = append(rest, t)
		}
	}
	c.timers = rest
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

func newMonitor(t *testing.T, cfg core.Config, prober Prober) (*Monitor, *fakeClock, *bytes.Buffer) {
	t.Helper()
	r, err := core.NewRouter(cfg)
	require.NoError(t, err)
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var logs bytes.Buffer
	m := New(r, Options{Clock: clock, Prober: prober, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(m.Stop)
	return m, clock, &logs
}

// Fake worker URLs: loopback ports nothing listens on.
var urls = []string{"http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11"}

func conditionOf(r *core.Router, url string) core.WorkerCondition {
	for _, w := range r.Workers() {
		if w.URL == url {
			return w.Condition
		}
	}
	return core.NumConditions
}

func TestEjectionEndsOnTheClockAndIsLogged(t *testing.T) {
	breaker := core.BreakerConfig{FailureThreshold: 2, SuccessThreshold: 1, Timeout: 10 * time.Second}
	m, clock, logs := newMonitor(t, core.Config{WorkerURLs: urls, Policy: core.DefaultConfig().Policy, VirtualNodes: 10, Breaker: &breaker}, nil)
	r := m.Router()
	for i := 0; i < 2; i++ {
		id, _, err := r.Acquire(urls[0], nil)
		require.NoError(t, err)
		require.True(t, m.Finish(id, core.OutcomeFailure))
	}
	require.Equal(t, core.ConditionEjected, conditionOf(r, urls[0]))
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "to=ejected")
	clock.Advance(9 * time.Second)
	assert.Equal(t, core.ConditionEjected, conditionOf(r, urls[0]))
	clock.Advance(time.Second)
	assert.Equal(t, core.ConditionHalfOpen, conditionOf(r, urls[0]), "the monitor ended the ejection at its time")
	assert.Contains(t, logs.String(), "to=half_open")

	// A second worker ejected later than the first: each ends on time.
	for _, u := range urls[1:] {
		for i := 0; i < 2; i++ {
			id, _, _ := r.Acquire(u, nil)
			m.Finish(id, core.OutcomeFailure)
		}
		clock.Advance(3 * time.Second)
	}
	clock.Advance(4 * time.Second) // urls[1] ejected 10 s ago, urls[2] 7 s ago
	assert.Equal(t, core.ConditionHalfOpen, conditionOf(r, urls[1]))
	assert.Equal(t, core.ConditionEjected, conditionOf(r, urls[2]))
	clock.Advance(3 * time.Second)
	assert.Equal(t, core.ConditionHalfOpen, conditionOf(r, urls[2]))
}

func TestProbeOnceReportsEachWorker(t *testing.T) {
	var mu sync.Mutex
	down := map[string]bool{urls[1]: true}
	prober := func(_ context.Context, url string) error {
		mu.Lock()
		defer mu.Unlock()
		if down[url] {
			return errors.New("connection refused")
		}
		return nil
	}
	hc := core.DefaultHealthCheckConfig()
	m, _, logs := newMonitor(t, core.Config{WorkerURLs: urls, Policy: core.DefaultConfig().Policy, VirtualNodes: 10, HealthCheck: &hc}, prober)
	r := m.Router()
	for i := 0; i < 3; i++ {
		m.ProbeOnce()
	}
	assert.Equal(t, core.ConditionUnhealthyProbe, conditionOf(r, urls[1]))
	assert.Equal(t, core.ConditionAvailable, conditionOf(r, urls[0]))
	assert.Contains(t, logs.String(), "to=unhealthy_probe")
	mu.Lock()
	down[urls[1]] = false
	mu.Unlock()
	m.ProbeOnce()
	assert.Equal(t, core.ConditionUnhealthyProbe, conditionOf(r, urls[1]), "1 of 2 good probes")
	m.ProbeOnce()
	assert.Equal(t, core.ConditionAvailable, conditionOf(r, urls[1]))
}

// A hung worker's probe is not sent again while the first is out.
func TestProbeOfAHungWorkerIsNotRepeated(t *testing.T) {
	release := make(chan struct{})
	var calls sync.Map
	prober := func(ctx context.Context, url string) error {
		n, _ := calls.LoadOrStore(url, new(int))
		*(n.(*int))++
		if url == urls[0] {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("hung")
		}
		return nil
	}
	hc := core.DefaultHealthCheckConfig()
	hc.Timeout = time.Minute
	m, _, _ := newMonitor(t, core.Config{WorkerURLs: urls[:2], Policy: core.DefaultConfig().Policy, VirtualNodes: 10, HealthCheck: &hc}, prober)
	done := make(chan struct{})
	go func() { m.ProbeOnce(); close(done) }()
	ids := m.Router().Workers()
	require.Eventually(t, func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.probing[ids[0].ID] }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { m.mu.Lock(); defer m.mu.Unlock(); return !m.probing[ids[1].ID] }, 5*time.Second, time.Millisecond)
	m.ProbeOnce() // probes urls[1] only
	close(release)
	<-done
	n0, _ := calls.Load(urls[0])
	n1, _ := calls.Load(urls[1])
	assert.Equal(t, 1, *(n0.(*int)))
	assert.Equal(t, 2, *(n1.(*int)))
}

// Regression (found by a review): each round of probes waited for all of them, so one hung
// worker spaced every worker's probes by the probe timeout, not the interval, and Stop waited
// for the hung probe to time out. Rounds run on the monitor's clock.
func TestAHungProbeHoldsNeitherTheOthersNorStop(t *testing.T) {
	hung := make(chan struct{}, 8)
	var answered atomic.Int64
	prober := func(ctx context.Context, url string) error {
		if url == urls[0] {
			hung <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		answered.Add(1)
		return nil
	}
	hc := core.DefaultHealthCheckConfig()
	hc.Interval, hc.Timeout = time.Second, time.Hour
	m, clock, _ := newMonitor(t, core.Config{WorkerURLs: urls[:2], Policy: core.DefaultConfig().Policy, VirtualNodes: 10, HealthCheck: &hc}, prober)
	m.Start()
	for round := int64(1); round <= 3; round++ {
		require.Eventually(t, func() bool { return answered.Load() == round }, 5*time.Second, time.Millisecond, "round %d", round)
		clock.Advance(time.Second)
	}
	assert.Len(t, hung, 1, "the hung worker is probed once while its probe is out")
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop waited for the hung probe")
	}
}

// Regression (found by an audit): probes were reported by URL, so a probe still out when its
// worker was removed counted on the worker added again under that URL, which started
// unhealthy_probe; and the new worker was not probed until the old probe returned.
func TestAProbeOfARemovedWorkerNeverCountsOnOneAddedAgain(t *testing.T) {
	started, answer := make(chan struct{}, 4), make(chan struct{})
	var probes sync.Mutex
	calls := 0
	prober := func(ctx context.Context, url string) error {
		probes.Lock()
		calls++
		first := calls == 1
		probes.Unlock()
		if !first {
			return nil
		}
		started <- struct{}{}
		select {
		case <-answer:
		case <-ctx.Done():
		}
		return errors.New("refused")
	}
	hc := core.DefaultHealthCheckConfig()
	hc.FailureThreshold, hc.Timeout = 1, time.Minute
	m, _, _ := newMonitor(t, core.Config{WorkerURLs: urls[:1], Policy: core.DefaultConfig().Policy, VirtualNodes: 10, HealthCheck: &hc}, prober)
	r := m.Router()
	done := make(chan struct{})
	go func() { m.ProbeOnce(); close(done) }()
	<-started
	require.NoError(t, r.RemoveWorker(urls[0]))
	require.NoError(t, r.AddWorker(urls[0]))
	m.ProbeOnce() // the new worker is probed at once (and passes)
	close(answer)
	<-done
	w := r.Workers()[0]
	assert.Equal(t, core.ConditionAvailable, w.Condition)
	assert.Equal(t, core.ProbeCounts{Passed: 1}, w.Probes)
}

func TestHTTPProber(t *testing.T) {
	status := http.StatusOK
	var paths []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		s := status
		mu.Unlock()
		w.WriteHeader(s)
	}))
	defer srv.Close()
	probe := HTTPProber("/health")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	assert.NoError(t, probe(ctx, srv.URL))
	assert.NoError(t, probe(ctx, srv.URL+"/"), "a trailing / is not doubled")
	mu.Lock()
	status = http.StatusServiceUnavailable
	mu.Unlock()
	err := probe(ctx, srv.URL)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "503"))
	assert.Equal(t, []string{"/health", "/health", "/health"}, paths)
	srv.Close()
	assert.Error(t, probe(ctx, srv.URL), "nothing listens any more")
}

// Regression (found by a review): a probe out when Stop cancelled it was reported as a failed
// probe, so freeing a router marked a healthy worker unhealthy_probe (failure_threshold 1).
func TestStopsCancelIsNoFailedProbe(t *testing.T) {
	out := make(chan struct{}, 1)
	prober := func(ctx context.Context, url string) error {
		out <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	hc := core.DefaultHealthCheckConfig()
	hc.FailureThreshold, hc.Timeout = 1, time.Hour
	m, _, logs := newMonitor(t, core.Config{WorkerURLs: urls[:1], Policy: core.DefaultConfig().Policy, VirtualNodes: 10, HealthCheck: &hc}, prober)
	m.Start()
	<-out
	m.Stop()
	assert.Equal(t, core.ConditionAvailable, conditionOf(m.Router(), urls[0]), "logs: %s", logs)
	assert.Equal(t, core.ProbeCounts{}, m.Router().Workers()[0].Probes)
}
