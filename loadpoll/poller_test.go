package loadpoll

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/internal/loopback"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRouter records what the poller tells it.
type fakeRouter struct {
	mu       sync.Mutex
	loads    map[string]core.EngineLoad
	forgets  map[string]int
	reported chan struct{}
	left     map[string]bool // workers removed from the router
}

func newFakeRouter() *fakeRouter {
	return &fakeRouter{loads: map[string]core.EngineLoad{}, forgets: map[string]int{}, reported: make(chan struct{}, 1000), left: map[string]bool{}}
}

func (f *fakeRouter) IsMember(url string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.left[url]
}

func (f *fakeRouter) ReportLoad(url string, load core.EngineLoad) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads[url] = load
	select {
	case f.reported <- struct{}{}:
	default:
	}
	return nil
}

func (f *fakeRouter) ForgetLoad(url string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.loads, url)
	f.forgets[url]++
	return nil
}

const w0 = "http://127.0.0.1:1/w0" // a worker URL nothing listens on: only its name matters here

func newTestPoller(t *testing.T, r Reporter, endpoint string, cfg Config, logs *[]string) *Poller {
	t.Helper()
	p, err := New(r, []Target{{Worker: w0, Endpoint: endpoint, Format: FormatSGLang}}, cfg, nil, func(f string, a ...any) {
		*logs = append(*logs, f)
	})
	require.NoError(t, err)
	return p
}

// Regression (found by a review): a worker removed from the router was polled on forever, each
// refused report counted as garbage. A worker that left is not polled until it joins again.
func TestAWorkerThatLeftIsNotPolled(t *testing.T) {
	r := newFakeRouter()
	p, err := New(r, []Target{{Worker: w0, Format: FormatSGLang}, {Worker: "http://127.0.0.1:2", Format: FormatSGLang}}, Config{Interval: time.Second}, nil, nil)
	require.NoError(t, err)
	polled := func() (workers []string) {
		for _, t := range p.due() {
			workers = append(workers, t.target.Worker)
			p.apply(t, time.Now(), core.EngineLoad{}, FailureUnreachable, errors.New("refused"))
		}
		return workers
	}
	assert.Equal(t, []string{w0, "http://127.0.0.1:2"}, polled())
	r.mu.Lock()
	r.left[w0] = true
	r.mu.Unlock()
	assert.Equal(t, []string{"http://127.0.0.1:2"}, polled())
	r.mu.Lock()
	r.left[w0] = false
	r.mu.Unlock()
	assert.Equal(t, []string{w0, "http://127.0.0.1:2"}, polled(), "polled again once it joined again")
}

// The state machine with a fake clock: a report stands until it is older than Expiry; each
// kind of failure is counted, and logged once per worker.
func TestReportsExpireAndFailuresAreLoggedOnce(t *testing.T) {
	r, logs := newFakeRouter(), []string{}
	p := newTestPoller(t, r, "http://127.0.0.1:1/get_load", Config{Interval: time.Second}, &logs)
	t0 := time.Unix(1000, 0)
	tr := p.trackers[0]
	p.apply(tr, t0, core.RequestsReport(7), "", nil)
	assert.Equal(t, core.RequestsReport(7), r.loads[w0])
	p.expire(t0.Add(3 * time.Second)) // exactly Expiry old: still stands
	assert.True(t, p.Stats()[0].Standing)
	for range 3 {
		p.apply(tr, t0.Add(time.Second), core.EngineLoad{}, FailureUnreachable, context.DeadlineExceeded)
	}
	p.apply(tr, t0.Add(time.Second), core.EngineLoad{}, FailureGarbage, ErrGarbage)
	p.expire(t0.Add(3*time.Second + 1))
	s := p.Stats()[0]
	assert.False(t, s.Standing)
	assert.Equal(t, uint64(1), s.Expired)
	assert.Equal(t, 1, r.forgets[w0])
	assert.Equal(t, map[Failure]uint64{FailureUnreachable: 3, FailureGarbage: 1}, s.Failures)
	assert.Len(t, logs, 2, "one line per kind of failure")
	p.expire(t0.Add(time.Hour)) // nothing stands: nothing more to forget
	assert.Equal(t, 1, r.forgets[w0])
}

// Regression (found by a review; docs/contract.md, "Engine load reports"): a poll cut short by
// the poller's stop was counted and logged as the worker's failure ("context canceled"), for
// every healthy worker slow to answer when a router closed. A stop says nothing of the worker.
func TestAPollCutShortByStopIsNoFailure(t *testing.T) {
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		asked <- struct{}{}
		<-release // answers only once the poller has stopped
	}))
	defer server.Close()
	defer close(release)
	r, logs := newFakeRouter(), []string{}
	p := newTestPoller(t, r, server.URL+"/get_load", Config{Interval: time.Hour, Timeout: time.Minute}, &logs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no poll within 10 s")
	}
	cancel()
	<-done
	assert.Empty(t, p.Stats()[0].Failures)
	assert.Empty(t, logs)
}

// Waiting tokens reach only a router whose leases weigh tokens, the requests only one whose
// leases weigh 1; the requests waiting reach every one.
func TestWaitingTokensOnlyForTokenWeights(t *testing.T) {
	report := core.EngineLoad{Requests: 9, Waiting: 3500, WaitingRequests: 3}
	for _, tokens := range []bool{false, true} {
		r, logs := newFakeRouter(), []string{}
		p := newTestPoller(t, r, "http://127.0.0.1:1/v1/loads", Config{Interval: time.Second, TokenWeights: tokens}, &logs)
		p.apply(p.trackers[0], time.Unix(1000, 0), report, "", nil)
		want := report
		if tokens {
			want.Requests = core.Unreported
		} else {
			want.Waiting = core.Unreported
		}
		assert.Equal(t, want, r.loads[w0], "token weights %v", tokens)
	}
}

// Regression (found by a review): the poller's own client cloned http.DefaultTransport, whose
// proxy comes from HTTP_PROXY and HTTPS_PROXY, so load polls went through a proxy the gateway's
// requests and probes never use (docs/contract.md: workers are reached directly). Go reads those
// variables once per process and never proxies loopback, so the transport itself is checked.
func TestPollsAreNeverSentThroughAProxy(t *testing.T) {
	p, err := New(newFakeRouter(), nil, Config{Interval: time.Second, Timeout: time.Second}, nil, nil)
	require.NoError(t, err)
	transport, ok := p.client.Transport.(*http.Transport)
	require.True(t, ok)
	assert.Nil(t, transport.Proxy, "a proxy function is set")
}

// Each poll against a real HTTP server on loopback: a load, a bad status, garbage, a flood, a
// hang (cut by the timeout) and a refused connection.
func TestPollOutcomes(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`[{"num_reqs": 5, "num_waiting_reqs": 2}]`))
	})
	mux.HandleFunc("/503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("\x00\xff{")) })
	mux.HandleFunc("/flood", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("[" + strings.Repeat(" ", maxBody) + "]"))
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	server := httptest.NewServer(mux)
	defer server.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + closed.Addr().String() + "/get_load"
	require.NoError(t, closed.Close())

	// Only the hang needs its poll cut short; the others get time to spare on a busy machine (a
	// megabyte read under the race detector once took more than 50 ms and counted as unreachable).
	patient, err := New(newFakeRouter(), nil, Config{Interval: time.Minute, Timeout: 30 * time.Second}, server.Client(), nil)
	require.NoError(t, err)
	impatient, err := New(newFakeRouter(), nil, Config{Interval: time.Second, Timeout: 50 * time.Millisecond}, server.Client(), nil)
	require.NoError(t, err)
	for _, c := range []struct {
		path    string
		load    core.EngineLoad
		failure Failure
	}{
		{server.URL + "/ok", core.EngineLoad{Requests: 5, Waiting: core.Unreported, WaitingRequests: 2}, ""},
		{server.URL + "/503", core.EngineLoad{}, FailureStatus},
		{server.URL + "/garbage", core.EngineLoad{}, FailureGarbage},
		{server.URL + "/flood", core.EngineLoad{}, FailureGarbage},
		{server.URL + "/hang", core.EngineLoad{}, FailureUnreachable},
		{refused, core.EngineLoad{}, FailureUnreachable},
	} {
		p := patient
		if strings.HasSuffix(c.path, "/hang") {
			p = impatient
		}
		load, failure, err := p.poll(context.Background(), Target{Worker: w0, Endpoint: c.path, Format: FormatSGLang})
		assert.Equal(t, c.load, load, c.path)
		assert.Equal(t, c.failure, failure, c.path)
		assert.Equal(t, c.failure == "", err == nil, "%s: %v", c.path, err)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := New(newFakeRouter(), []Target{{Worker: w0, Format: "triton"}}, Config{}, nil, nil)
	assert.ErrorContains(t, err, `load format must be one of sglang, sglang_loads, vllm, got "triton"`)
	_, err = New(newFakeRouter(), nil, Config{Interval: -1}, nil, nil)
	assert.ErrorContains(t, err, "must not be negative")
}

// The router is a Reporter.
var _ Reporter = (*core.Router)(nil)

// Run polls until cancelled, then forgets what stands and closes its connections to the engines.
// Regression (found by an audit): the poller's default client shared http.DefaultTransport, so
// its keep-alive connections stayed open after it stopped (up to 90 s idle).
func TestRunReportsUntilCancelled(t *testing.T) {
	var mu sync.Mutex
	open := 0
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`[{"num_reqs": 3}, {"num_reqs": 1}]`))
	}))
	server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch state {
		case http.StateNew:
			open++
		case http.StateClosed, http.StateHijacked:
			open--
		}
	}
	server.Start()
	defer server.Close()
	r, logs := newFakeRouter(), []string{}
	p := newTestPoller(t, r, server.URL+"/get_load", Config{Interval: 10 * time.Millisecond, Timeout: 5 * time.Second, Expiry: time.Minute}, &logs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	for range 3 {
		select {
		case <-r.reported:
		case <-time.After(10 * time.Second):
			t.Fatal("no report within 10 s")
		}
	}
	cancel()
	<-done
	assert.Empty(t, r.loads, "forgotten when the poller stops")
	assert.GreaterOrEqual(t, p.Stats()[0].Reports, uint64(3))
	assert.Empty(t, logs)
	loopback.WaitFor(t, "the poller's connections to close", func() bool { mu.Lock(); defer mu.Unlock(); return open == 0 })
}
