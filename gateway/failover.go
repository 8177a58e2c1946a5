package gateway

import (
	"context"
	"io"
	"net/http"

	"github.com/bounded-router/bounded-router/core"
)

// Why a request was sent to another worker (the retries metric's reasons).
const (
	retryConnection  = iota // the worker refused, reset or closed the connection
	retryStatus             // the worker answered 502, 503 or 504
	retryPushback           // the worker answered 429
	retryUnavailable        // the worker stopped being routable while the request waited for it
	numRetryReasons
)

var retryReasonNames = [numRetryReasons]string{"connection", "status", "pushback", "unavailable"}

// maxDiscard is how much of a failed answer's body is read before its connection is dropped, so
// that a short error body leaves the connection reusable.
const maxDiscard = 4 << 10

// failover is the proxy's transport (contract: Worker failures, "Where a retry goes"): it sends
// the request to the exchange's worker and, when that worker fails it before any byte of the
// answer reached the client, finishes that lease as the failure it was and sends the request
// again under a new lease, to a worker not yet tried, up to retry_max_retries more times. Nothing
// has been written to the client while RoundTrip runs, so a retry is always before the first byte.
type failover struct{ g *Gateway }

func (f failover) RoundTrip(out *http.Request) (*http.Response, error) {
	g, ex := f.g, exchangeOf(out.Context())
	for tries := 0; ; tries++ {
		res, err := g.try(ex, out)
		outcome, reason := ex.judge(res, err)
		ex.outcome = outcome
		if reason < 0 || tries >= g.maxRetries || ex.Err() != nil {
			return res, err
		}
		next := g.router.RouteAvoiding(&ex.request, ex.tried)
		if next.Lease == 0 {
			return res, err // nowhere else to go: the client gets this worker's answer
		}
		target, terr := g.targetOf(next.WorkerURL)
		if terr != nil {
			g.router.Release(next.Lease, false)
			return res, err
		}
		discard(res)
		g.health.Finish(ex.decision.Lease, outcome)
		g.retries[reason].Add(1)
		ex.decision, ex.target = next, target
		ex.tried = append(ex.tried, next.WorkerID)
		out = ex.retargeted(out)
	}
}

// try sends one try to the exchange's worker, cancelled with errWorkerDown if that worker stops
// being routable before its response headers arrive.
func (g *Gateway) try(ex *exchange, out *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(out.Context())
	g.waiting.add(ex.decision.WorkerID, ex, cancel)
	res, err := g.transport.RoundTrip(out.WithContext(ctx))
	g.waiting.remove(ex)
	if err != nil && context.Cause(ctx) == errWorkerDown {
		err = errWorkerDown
	}
	return res, err
}

// judge classifies one try and says why it may be retried (-1: it may not). A connection
// error is retried only when the client is still there and the first-byte timeout has not
// passed; a timeout before the headers is a failure, not retried (the deadline is spent).
func (ex *exchange) judge(res *http.Response, err error) (core.Outcome, int) {
	switch {
	case ex.client.Err() != nil:
		return core.OutcomeNeutral, -1 // the client left: nothing to say about the worker
	case err != nil && ex.timedOut.Load() != notTimedOut:
		return core.OutcomeFailure, -1
	case err == errWorkerDown:
		return core.OutcomeFailure, retryUnavailable
	case err != nil:
		return core.OutcomeFailure, retryConnection
	}
	outcome := core.OutcomeOfStatus(res.StatusCode)
	switch res.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return outcome, retryStatus
	case http.StatusTooManyRequests:
		return outcome, retryPushback
	}
	return outcome, -1
}

// retargeted is the request to the exchange's new worker: a copy (the transport may still read
// the old one's body) with the new worker's scheme, host and path prefix and a fresh body.
func (ex *exchange) retargeted(out *http.Request) *http.Request {
	next := out.Clone(out.Context())
	ex.aim(next)
	if len(ex.body) > 0 {
		next.Body, _ = ex.getBody()
	}
	return next
}

func discard(res *http.Response) {
	if res != nil && res.Body != nil {
		io.Copy(io.Discard, io.LimitReader(res.Body, maxDiscard))
		res.Body.Close()
	}
}

// finalOutcome is how the request ended on its last worker: the answer's outcome, unless the
// worker broke off its stream (or was too slow for the deadline) while the client was still
// reading.
func (ex *exchange) finalOutcome() core.Outcome {
	if ex.outcome == core.OutcomeSuccess && ex.readErr != nil && ex.client.Err() == nil && ex.timedOut.Load() != clientTimedOut {
		return core.OutcomeFailure
	}
	return ex.outcome
}
