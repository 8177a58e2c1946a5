package loadpoll

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/bounded-router/bounded-router/core"
)

// Reporter takes the loads: core.Router satisfies it.
type Reporter interface {
	ReportLoad(url string, load core.EngineLoad) error
	ForgetLoad(url string) error
	IsMember(url string) bool
}

// Target is one worker's load endpoint.
type Target struct {
	// Worker is the worker's URL in the router; Endpoint the URL polled (e.g. Worker + "/get_load").
	Worker, Endpoint string
	Format           Format
}

// Config says how often to poll and when a report is too old to stand.
type Config struct {
	// Interval between polls of a worker (default DefaultInterval). A request lives for seconds
	// while its prompt is prefilled; at 200 ms a report misses only the requests other replicas
	// sent in the last fifth of a second, and costs each engine five small requests a second
	// per router.
	Interval time.Duration
	// Timeout of one poll (default: Interval); a poll still unanswered is a failure.
	Timeout time.Duration
	// Expiry: a report older than this is forgotten, so the worker's load is again this
	// router's leases (default: 3 Intervals, i.e. after three failed polls in a row).
	Expiry time.Duration
	// TokenWeights says the router's leases weigh prompt tokens: an engine's waiting tokens,
	// where its format gives them, are its prefill queue, and its requests are not reported
	// (they are no load in tokens); otherwise (and always with unit weights) the router weighs
	// its requests waiting by its mean lease.
	TokenWeights bool
}

// DefaultInterval is the interval of Config unless set.
const DefaultInterval = 200 * time.Millisecond

// maxBody bounds what a poll reads: a load report is a few hundred bytes, a vLLM /metrics page
// tens of kilobytes.
const maxBody = 1 << 20

func (c Config) withDefaults() (Config, error) {
	if c.Interval < 0 || c.Timeout < 0 || c.Expiry < 0 {
		return c, fmt.Errorf("load poll interval, timeout and expiry must not be negative")
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = c.Interval
	}
	if c.Expiry == 0 {
		c.Expiry = 3 * c.Interval
	}
	return c, nil
}

// Failure names why a poll gave no load.
type Failure string

const (
	FailureUnreachable Failure = "unreachable" // no answer: refused, reset, timed out
	FailureStatus      Failure = "status"      // an HTTP status other than 200
	FailureGarbage     Failure = "garbage"     // an answer that is not a load report, or too large
)

// WorkerStats are one worker's counters.
type WorkerStats struct {
	Worker   string
	Reports  uint64             // polls whose load was reported
	Failures map[Failure]uint64 // polls that gave none, by why
	Expired  uint64             // reports forgotten for their age
	Standing bool               // a report stands now
}

// tracker is one worker's state: when its last report was taken, and its counters.
type tracker struct {
	target   Target
	last     time.Time
	inFlight bool
	stats    WorkerStats
	logged   map[Failure]bool
}

// Poller polls every target each Interval and tells the reporter.
type Poller struct {
	reporter Reporter
	config   Config
	client   *http.Client
	// ownClient is set when New made the client: its connections are closed when Run ends.
	ownClient bool
	logf      func(format string, args ...any)

	mu       sync.Mutex
	trackers []*tracker
}

// New checks the targets and the config; logf receives the first failure of each kind per
// worker (nil: not logged).
func New(reporter Reporter, targets []Target, config Config, client *http.Client, logf func(string, ...any)) (*Poller, error) {
	config, err := config.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Poller{reporter: reporter, config: config, client: client, logf: logf}
	for _, t := range targets {
		if !slices.Contains(Formats, t.Format) {
			return nil, fmt.Errorf("worker %s: %w", t.Worker, errUnknownFormat(t.Format))
		}
		p.trackers = append(p.trackers, &tracker{target: t, stats: WorkerStats{Worker: t.Worker, Failures: map[Failure]uint64{}}, logged: map[Failure]bool{}})
	}
	if p.client == nil {
		// Its own connections, closed when the poller stops (http.DefaultTransport's would stay),
		// and never through a proxy, as the gateway reaches the workers.
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.Proxy = nil
		p.client = &http.Client{Transport: transport}
		p.ownClient = true
	}
	return p, nil
}

// Run polls until ctx is done, then forgets every standing report.
func (p *Poller) Run(ctx context.Context) {
	ticker := time.NewTicker(p.config.Interval)
	defer ticker.Stop()
	var polls sync.WaitGroup
	defer polls.Wait()
	for {
		now := time.Now()
		p.expire(now)
		for _, t := range p.due() {
			polls.Add(1)
			go func() {
				defer polls.Done()
				load, failure, err := p.poll(ctx, t.target)
				if ctx.Err() != nil {
					return // cut short by the stop: says nothing of the worker
				}
				p.apply(t, time.Now(), load, failure, err)
			}()
		}
		select {
		case <-ctx.Done():
			polls.Wait()
			p.forgetAll()
			if p.ownClient {
				p.client.CloseIdleConnections()
			}
			return
		case <-ticker.C:
		}
	}
}

// due marks the targets without a poll in flight as polled and returns them: a worker that
// hangs has at most one poll open, and one that left the router has none until it joins again.
func (p *Poller) due() []*tracker {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*tracker
	for _, t := range p.trackers {
		if !t.inFlight && p.reporter.IsMember(t.target.Worker) {
			t.inFlight = true
			out = append(out, t)
		}
	}
	return out
}

// poll asks one endpoint for its load.
func (p *Poller) poll(ctx context.Context, target Target) (core.EngineLoad, Failure, error) {
	ctx, cancel := context.WithTimeout(ctx, p.config.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.Endpoint, nil)
	if err != nil {
		return core.EngineLoad{}, FailureUnreachable, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return core.EngineLoad{}, FailureUnreachable, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return core.EngineLoad{}, FailureStatus, fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	switch {
	case err != nil:
		return core.EngineLoad{}, FailureUnreachable, err
	case len(body) > maxBody:
		return core.EngineLoad{}, FailureGarbage, fmt.Errorf("%w: an answer over %d bytes", ErrGarbage, maxBody)
	}
	load, err := ParseLoad(target.Format, body)
	if err != nil {
		return core.EngineLoad{}, FailureGarbage, err
	}
	return load, "", nil
}

// apply records the outcome of a poll of t taken at now.
func (p *Poller) apply(t *tracker, now time.Time, load core.EngineLoad, failure Failure, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t.inFlight = false
	if err == nil {
		if p.config.TokenWeights {
			load.Requests = core.Unreported // a count of requests is no load in tokens
		} else {
			load.Waiting = core.Unreported // nor tokens one in requests
		}
		if err = p.reporter.ReportLoad(t.target.Worker, load); err == nil {
			t.last, t.stats.Reports, t.stats.Standing = now, t.stats.Reports+1, true
			return
		}
		failure = FailureGarbage // the router refused the load, or the worker left it during the poll
	}
	t.stats.Failures[failure]++
	if !t.logged[failure] && p.logf != nil {
		t.logged[failure] = true
		p.logf("load poll of worker %s (%s): %v (further %s failures of this worker are counted, not logged)", t.target.Worker, t.target.Endpoint, err, failure)
	}
}

// expire forgets the reports older than Expiry at now.
func (p *Poller) expire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.trackers {
		if t.stats.Standing && now.Sub(t.last) > p.config.Expiry {
			t.stats.Standing = false
			t.stats.Expired++
			_ = p.reporter.ForgetLoad(t.target.Worker) // a worker that left has nothing to forget
		}
	}
}

func (p *Poller) forgetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.trackers {
		if t.stats.Standing {
			t.stats.Standing = false
			_ = p.reporter.ForgetLoad(t.target.Worker)
		}
	}
}

// Stats returns every worker's counters, in the targets' order.
func (p *Poller) Stats() []WorkerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]WorkerStats, len(p.trackers))
	for i, t := range p.trackers {
		out[i] = t.stats
		out[i].Failures = make(map[Failure]uint64, len(t.stats.Failures))
		for k, v := range t.stats.Failures {
			out[i].Failures[k] = v
		}
	}
	return out
}
