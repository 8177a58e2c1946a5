package gateway

import (
	"bufio"
	"context"
	"io"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
)

// contract: Worker failures, "Where a retry goes".

// named is a worker that answers its name, or status when it is not 200.
func named(t *testing.T, name string, status *atomic.Int32, hits *atomic.Int32) string {
	return worker(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if s := int(status.Load()); s != http.StatusOK {
			http.Error(w, name+" failing", s)
			return
		}
		w.Write([]byte(name))
	}).URL
}

type fleet struct {
	urls     []string
	statuses []*atomic.Int32
	hits     []*atomic.Int32
}

func newFleet(t *testing.T, n int) *fleet {
	f := &fleet{}
	for i := 0; i < n; i++ {
		s, h := new(atomic.Int32), new(atomic.Int32)
		s.Store(http.StatusOK)
		f.statuses, f.hits = append(f.statuses, s), append(f.hits, h)
		f.urls = append(f.urls, named(t, "w"+itoa(int64(i)), s, h))
	}
	return f
}

func (f *fleet) index(url string) int {
	for i, u := range f.urls {
		if u == url {
			return i
		}
	}
	return -1
}

// ringOrder is the key's clockwise order of workers, read off the preferred-worker rule (the
// first available worker clockwise) by marking each preferred worker unhealthy in turn.
func ringOrder(t *testing.T, urls []string, key string) []int {
	r := newRouter(t, urls...)
	var order []int
	for range urls {
		d := r.Select(&core.Request{RoutingKey: []byte(key)})
		for i, u := range urls {
			if u == d.WorkerURL {
				order = append(order, i)
			}
		}
		if err := r.SetHealthy(d.WorkerURL, false); err != nil {
			t.Fatal(err)
		}
	}
	return order
}

// firstOn is a routing key whose first ring worker is urls[i].
func firstOn(t *testing.T, urls []string, i int) string {
	for n := 0; n < 1000; n++ {
		if key := "key-" + itoa(int64(n)); ringOrder(t, urls, key)[0] == i {
			return key
		}
	}
	t.Fatalf("no key of 1000 has %s first", urls[i])
	return ""
}

func keyed(key string) http.Header {
	return http.Header{"X-Smg-Routing-Key": {key}}
}

func TestRetryGoesToTheKeysNextRingWorker(t *testing.T) {
	f := newFleet(t, 4)
	order := ringOrder(t, f.urls, "session-7")
	f.statuses[order[0]].Store(http.StatusServiceUnavailable)
	r := newRouter(t, f.urls...)
	g := start(t, r, Options{ExposeRoutingHeaders: true})
	res, body := get(t, g, "/v1/completions", keyed("session-7"))
	if res.StatusCode != 200 || body != "w"+itoa(int64(order[1])) {
		t.Fatalf("got %d %q, want w%d (the key's second ring worker)", res.StatusCode, body, order[1])
	}
	if b := res.Header.Get(HeaderBranch); b != "failover" {
		t.Fatalf("branch %q, want failover", b)
	}
	waitLeases(t, r, 0)
	w := r.Workers()[order[0]]
	if w.Outcomes[core.OutcomeFailure] != 1 || w.Routed != 1 {
		t.Fatalf("the failing worker: %+v", w)
	}
	if n := g.retries[retryStatus].Load(); n != 1 {
		t.Fatalf("retries by status: %d", n)
	}
}

func TestRetryNeverRevisitsATriedWorker(t *testing.T) {
	f := newFleet(t, 3)
	for _, s := range f.statuses {
		s.Store(http.StatusBadGateway)
	}
	r := newRouter(t, f.urls...)
	five := 5
	g := start(t, r, Options{RetryMaxRetries: &five})
	res, body := get(t, g, "/x", keyed("k"))
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, "failing") {
		t.Fatalf("got %d %q: the last worker's own answer", res.StatusCode, body)
	}
	for i, h := range f.hits {
		if h.Load() != 1 {
			t.Fatalf("worker %d tried %d times, want once each", i, h.Load())
		}
	}
	waitLeases(t, r, 0)
}

// Regression (found by a review; docs/contract.md, "Where a retry goes"): a retry that found no
// untried worker counted no_healthy_workers, its worker available, and a target request counted
// target_worker_miss beside its target_worker_hit. Each request counts the branch of its route.
func TestAFailedTryCountsNoBranchOfARefusal(t *testing.T) {
	f := newFleet(t, 1)
	f.statuses[0].Store(http.StatusServiceUnavailable)
	r := newRouter(t, f.urls...)
	g := start(t, r, Options{})
	get(t, g, "/x", http.Header{"X-Smg-Target-Worker": {"0"}})
	get(t, g, "/x", keyed("k"))
	waitLeases(t, r, 0)
	st := r.Stats()
	if st.Branches[core.BranchTargetWorkerMiss] != 0 || st.Branches[core.BranchNoHealthyWorkers] != 0 {
		t.Fatalf("target_worker_miss %d, no_healthy_workers %d: the worker was found and answered",
			st.Branches[core.BranchTargetWorkerMiss], st.Branches[core.BranchNoHealthyWorkers])
	}
	if st.Branches[core.BranchTargetWorkerHit] != 1 || st.Branches[core.BranchExplicitRoutingKeyHit] != 1 {
		t.Fatalf("branches %v: one route each", st.Branches)
	}
}

func TestRetriesStopAtTheLimitAndCanBeDisabled(t *testing.T) {
	f := newFleet(t, 4)
	for _, s := range f.statuses {
		s.Store(http.StatusServiceUnavailable)
	}
	r := newRouter(t, f.urls...)
	g := start(t, r, Options{}) // retry_max_retries 2: three tries
	get(t, g, "/x", keyed("k"))
	total := int32(0)
	for _, h := range f.hits {
		total += h.Load()
		h.Store(0)
	}
	if total != 3 {
		t.Fatalf("%d tries, want 1 + 2 retries", total)
	}
	g2 := start(t, newRouter(t, f.urls...), Options{DisableRetries: true})
	res, _ := get(t, g2, "/x", keyed("k"))
	total = 0
	for _, h := range f.hits {
		total += h.Load()
	}
	if res.StatusCode != http.StatusServiceUnavailable || total != 1 {
		t.Fatalf("disable_retries: %d after %d tries", res.StatusCode, total)
	}
}

func TestConnectionRefusedFailsOver(t *testing.T) {
	f := newFleet(t, 2)
	dead := worker(t, func(http.ResponseWriter, *http.Request) {})
	deadURL := dead.URL
	dead.Close() // nothing listens on its port now
	urls := append([]string{deadURL}, f.urls...)
	r := newRouter(t, urls...)
	g := start(t, r, Options{})
	sent := 0
	for i := 0; i < 1000 && sent < 8; i++ {
		key := "key-" + itoa(int64(i))
		if ringOrder(t, urls, key)[0] != 0 {
			continue // the dead worker is not this key's first
		}
		sent++
		res, body := get(t, g, "/x", keyed(key))
		if res.StatusCode != 200 || !strings.HasPrefix(body, "w") {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
	}
	if w := r.Workers()[0]; w.Condition != core.ConditionEjected || w.Outcomes[core.OutcomeFailure] != 5 {
		t.Fatalf("the dead worker after 8 keys that prefer it: %+v (5 failures eject it)", w)
	}
	waitLeases(t, r, 0)
}

func TestPushbackIsRetriedAndCountsNeitherWay(t *testing.T) {
	f := newFleet(t, 2)
	order := ringOrder(t, f.urls, "p")
	f.statuses[order[0]].Store(http.StatusTooManyRequests)
	r := newRouter(t, f.urls...)
	g := start(t, r, Options{})
	for i := 0; i < 8; i++ {
		if res, _ := get(t, g, "/x", keyed("p")); res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	w := r.Workers()[order[0]]
	if w.Outcomes[core.OutcomePushback] != 8 || w.Condition != core.ConditionAvailable || w.ConsecutiveFailures != 0 {
		t.Fatalf("pushback worker: %+v", w)
	}
	if n := g.retries[retryPushback].Load(); n != 8 {
		t.Fatalf("pushback retries %d", n)
	}
}

// Once a byte of the answer went to the client, a failing worker is not retried: the client
// sees the stream cut, and the worker's lease ends as a failure.
func TestNoRetryAfterTheFirstByte(t *testing.T) {
	var other atomic.Int32
	cut := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: 1\n\n"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the worker drops the connection mid-stream
	})
	spare := worker(t, func(w http.ResponseWriter, r *http.Request) { other.Add(1); w.Write([]byte("spare")) })
	urls := []string{cut.URL, spare.URL}
	key := firstOn(t, urls, 0)
	r := newRouter(t, urls...)
	g := start(t, r, Options{})
	req, _ := http.NewRequest("GET", "http://"+g.Addr()+"/stream", nil)
	req.Header = keyed(key)
	res, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body) // to the end, so the client is still there when the worker breaks off
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(string(got), "data: 1") || err == nil {
		t.Fatalf("got %d %q (%v): want the first event, then the stream cut", res.StatusCode, got, err)
	}
	waitLeases(t, r, 0)
	if other.Load() != 0 {
		t.Fatal("the request was sent again after its first byte")
	}
	if w := r.Workers()[0]; w.Outcomes[core.OutcomeFailure] != 1 {
		t.Fatalf("the cut stream's worker: %+v", w.Outcomes)
	}
}

// Seeded random faults (refused connections, 503s, 429s, streams cut after their first byte,
// clients that leave) over concurrent keyed requests: every lease ends, none leaks, and every
// request that got a 200 was served by a worker that answered it.
func TestNoLeaseLeaksUnderRandomFaults(t *testing.T) {
	rng := rand.New(rand.NewSource(20))
	var mu sync.Mutex
	draw := func(n int) int { mu.Lock(); defer mu.Unlock(); return rng.Intn(n) }
	var urls []string
	for i := 0; i < 4; i++ {
		urls = append(urls, worker(t, func(w http.ResponseWriter, r *http.Request) {
			switch draw(6) {
			case 0:
				http.Error(w, "busy", http.StatusServiceUnavailable)
			case 1:
				http.Error(w, "slow down", http.StatusTooManyRequests)
			case 2:
				w.Write([]byte("partial"))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			default:
				w.Write([]byte("ok"))
			}
		}).URL)
	}
	dead := worker(t, func(http.ResponseWriter, *http.Request) {})
	urls = append(urls, dead.URL)
	dead.Close()
	r := newRouter(t, urls...)
	g := start(t, r, Options{})
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cl := client()
			for i := 0; i < 40; i++ {
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.Addr()+"/x", nil)
				req.Header = keyed("k" + itoa(int64(draw(30))))
				if res, err := cl.Do(req); err == nil {
					if draw(4) == 0 {
						cancel() // the client leaves before reading the answer
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				cancel()
			}
		}(c)
	}
	wg.Wait()
	waitLeases(t, r, 0)
	var routed, ended uint64
	for _, w := range r.Workers() {
		routed += w.Routed
		for _, n := range w.Outcomes {
			ended += n
		}
	}
	if routed != ended || r.Stats().Leaked != 0 {
		t.Fatalf("%d leases taken, %d ended, %d leaked", routed, ended, r.Stats().Leaked)
	}
}

// A worker that accepted a request and went silent: once it stops being routable (its probes
// fail, or the user sets it unhealthy), the requests waiting for its headers go to another worker
// at once instead of waiting out first_byte_timeout.
func TestRequestsWaitingOnAWorkerThatGoesDownFailOver(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	var arrived atomic.Int32
	silent := worker(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}).URL
	f := newFleet(t, 2)
	urls := append([]string{silent}, f.urls...)
	key := firstOn(t, urls, 0)
	order := ringOrder(t, urls, key)
	r := newRouter(t, urls...)
	g := start(t, r, Options{ExposeRoutingHeaders: true})
	type answer struct {
		status int
		body   string
		branch string
	}
	answers := make(chan answer, 3)
	for i := 0; i < 3; i++ {
		go func() {
			req, _ := http.NewRequest("GET", "http://"+g.Addr()+"/x", nil)
			req.Header = keyed(key)
			res, err := client().Do(req)
			if err != nil {
				answers <- answer{status: -1, body: err.Error()}
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			answers <- answer{res.StatusCode, string(body), res.Header.Get(HeaderBranch)}
		}()
	}
	eventually(t, "three requests waiting on the silent worker", func() bool { return arrived.Load() == 3 })
	if err := r.SetHealthy(silent, false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		a := <-answers
		if a.status != 200 || a.body != "w"+itoa(int64(order[1]-1)) || a.branch != "failover" {
			t.Fatalf("got %+v, want the key's next ring worker w%d", a, order[1]-1)
		}
	}
	waitLeases(t, r, 0)
	if n := g.retries[retryUnavailable].Load(); n != 3 {
		t.Fatalf("retries for an unavailable worker: %d", n)
	}
	// Regression (found by an audit): the cancelled tries counted as the worker's failures, so
	// cb_failure_threshold of them ejected it behind the user's verdict. The worker did not fail
	// them; the gateway took them away (contract: Worker failures, "Outcomes").
	if err := r.SetHealthy(silent, true); err != nil {
		t.Fatal(err)
	}
	s := r.Workers()[0]
	if s.Outcomes[core.OutcomeFailure] != 0 || s.Outcomes[core.OutcomeNeutral] != 3 || s.Condition != core.ConditionAvailable {
		t.Fatalf("the worker whose waiting requests were taken away: outcomes %v, condition %v", s.Outcomes, s.Condition)
	}
}

// Regression (found by a review): before a retry, the failed answer's body was read (up to 4
// KiB) with no deadline of its own, so a worker that sent a 503's head and part of its body and
// went silent held the request until first_byte_timeout: a 504 to the client, though another
// worker was there, and a failure charged to the lease on that worker, which never saw the
// request. The failed answer is now closed unread.
func TestARetryDoesNotWaitOnTheFailedAnswersBody(t *testing.T) {
	addr, _ := rawWorker(t, func(conn net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
			conn.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\npartial"))
			conn.Read(make([]byte, 1)) // silent until the gateway closes it, or the test ends
		}
	})
	stalled := "http://" + addr
	good := newFleet(t, 1).urls[0]
	urls := []string{stalled, good}
	key := firstOn(t, urls, 0)
	r := newRouter(t, urls...)
	g := start(t, r, Options{FirstByteTimeout: 30})
	begin := time.Now()
	res, body := get(t, g, "/v1/completions", keyed(key))
	took := time.Since(begin)
	waitLeases(t, r, 0)
	if res.StatusCode != 200 || body != "w0" || took > 10*time.Second {
		t.Fatalf("got %d %q after %v, want the second worker's answer at once", res.StatusCode, body, took)
	}
	if o := r.Workers()[1].Outcomes; o[core.OutcomeFailure] != 0 || o[core.OutcomeSuccess] != 1 {
		t.Fatalf("the second worker's outcomes: %v", o)
	}
}

// Regression (found by a review): removing a worker told nobody, so a request waiting for a
// removed worker's headers waited out first_byte_timeout there and got a 504. The router now
// announces a removal as a condition change, and the waiting tries on that worker fail over.
func TestARequestWaitingOnARemovedWorkerFailsOver(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	silent := worker(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}).URL
	good := newFleet(t, 1).urls[0]
	urls := []string{silent, good}
	key := firstOn(t, urls, 0)
	r := newRouter(t, urls...)
	g := start(t, r, Options{FirstByteTimeout: 60})
	done := make(chan string, 1)
	go func() {
		res, body := get(t, g, "/x", keyed(key))
		done <- itoa(int64(res.StatusCode)) + " " + body
	}()
	waitLeases(t, r, 1)
	if err := r.RemoveWorker(silent); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if got != "200 w0" {
			t.Fatalf("got %q, want the other worker's answer", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request waiting on the removed worker was not sent to another")
	}
	waitLeases(t, r, 0)
	if n := g.retries[retryUnavailable].Load(); n != 1 {
		t.Fatalf("retries for an unavailable worker: %d", n)
	}
}

// Regression (found by an audit): a worker that stopped being routable after it was chosen but
// before its try was kept among the waiting ones was announced with no try to cancel, so that
// request waited out first_byte_timeout there. A try now checks, when some worker went down
// since its worker was chosen, whether it was that one.
func TestATryOnAWorkerThatWentDownBeforeItWaitedIsCancelled(t *testing.T) {
	r := newRouter(t, unreachable, "http://127.0.0.1:10")
	g := start(t, r, Options{})
	x, y := r.Workers()[0].ID, r.Workers()[1].ID
	seen := g.waiting.downs.Load()
	if g.wentDownSince(x, seen) {
		t.Fatal("nothing went down")
	}
	if err := r.SetHealthy(unreachable, false); err != nil {
		t.Fatal(err)
	}
	if !g.wentDownSince(x, seen) || g.wentDownSince(y, seen) || g.wentDownSince(x, g.waiting.downs.Load()) {
		t.Fatalf("after %s went down: x %v, y %v, x seen since %v", unreachable, g.wentDownSince(x, seen), g.wentDownSince(y, seen), g.wentDownSince(x, g.waiting.downs.Load()))
	}
}
