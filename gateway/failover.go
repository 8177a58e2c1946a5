package gateway

import (
	"github.com/valyala/fasthttp"

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

// roundTrips sends the request to the exchange's worker (contract: Worker failures, "Where a retry
// goes") and, when that worker fails it before any byte of the answer reached the client,
// finishes that lease as the failure it was and sends the request again under a new lease, to a
// worker not yet tried, up to retry_max_retries more times. Nothing has been written to the
// client while it runs, so a retry is always before the first byte. It returns the last try's
// answer body (its head is in ex.answer) or error.
func (g *Gateway) roundTrips(ex *exchange) (answerBody, error) {
	for tries := 0; ; tries++ {
		body, err := g.try(ex)
		outcome, reason := ex.judge(err)
		ex.outcome = outcome
		if reason < 0 || tries >= g.maxRetries || ex.stopped.err() != nil {
			return body, err
		}
		ex.downsSeen = g.waiting.downs.Load()
		next := g.router.RouteAvoiding(&ex.request, ex.tried)
		if next.Lease == 0 {
			return body, err // nowhere else to go: the client gets this worker's answer
		}
		target, terr := g.targetOf(next.WorkerURL)
		if terr != nil {
			g.router.Release(next.Lease, false)
			return body, err
		}
		discard(body)
		g.health.Finish(ex.decision.Lease, outcome)
		g.retries[reason].Add(1)
		ex.decision, ex.target, ex.out.target = next, target, target
		ex.tried = append(ex.tried, next.WorkerID)
	}
}

// try sends one try to the exchange's worker, cancelled with errWorkerDown if that worker stops
// being routable before its response headers arrive.
func (g *Gateway) try(ex *exchange) (answerBody, error) {
	ex.try.begin(&ex.stopped)
	g.waiting.add(ex.decision.WorkerID, ex, &ex.try)
	if g.wentDownSince(ex.decision.WorkerID, ex.downsSeen) {
		ex.try.cancel(errWorkerDown) // it went down before this try was here to be cancelled
	}
	body, err := g.transport.roundTrip(&ex.try, &ex.out, ex.answer)
	g.waiting.remove(ex)
	if ex.try.err() == errWorkerDown {
		// Also when the cancel came just after the headers: its connection is closed, so the
		// answer could not be read, and nothing of it has reached the client.
		discard(body)
		return nil, errWorkerDown
	}
	return body, err
}

// judge classifies one try and says why it may be retried (-1: it may not). A connection
// error is retried only when the client is still there and the first-byte timeout has not
// passed; a timeout before the headers is a failure, not retried (the deadline is spent).
func (ex *exchange) judge(err error) (core.Outcome, int) {
	switch {
	case ex.left.Load():
		return core.OutcomeNeutral, -1 // the client left: nothing to say about the worker
	case err != nil && ex.timedOut.Load() != notTimedOut:
		return core.OutcomeFailure, -1
	case err == errWorkerDown:
		// Taken away by the gateway, not failed by the worker: counted against it, these would
		// eject a worker the user or its probes had set aside, behind their verdict.
		return core.OutcomeNeutral, retryUnavailable
	case err != nil:
		return core.OutcomeFailure, retryConnection
	}
	status := ex.answer.StatusCode()
	outcome := core.OutcomeOfStatus(status)
	switch status {
	case fasthttp.StatusBadGateway, fasthttp.StatusServiceUnavailable, fasthttp.StatusGatewayTimeout:
		return outcome, retryStatus
	case fasthttp.StatusTooManyRequests:
		return outcome, retryPushback
	}
	return outcome, -1
}

// discard closes a failed answer unread, and its connection with it: reading even a short
// error body could wait on a worker that went silent after its head.
func discard(body answerBody) {
	if body != nil {
		body.Close()
	}
}

// finalOutcome is how the request ended on its last worker: the answer's outcome, unless the
// worker broke off its stream (or was too slow for the deadline) while the client was still
// reading.
func (ex *exchange) finalOutcome() core.Outcome {
	if ex.outcome == core.OutcomeSuccess && ex.readErr != nil && !ex.left.Load() && ex.timedOut.Load() != clientTimedOut {
		return core.OutcomeFailure
	}
	return ex.outcome
}
