package gateway

import (
	"context"
	"errors"
	"testing"
)

// hookCounter records the causes a canceller's hook got.
type hookCounter struct{ causes []error }

func (h *hookCounter) cancelled(cause error) { h.causes = append(h.causes, cause) }

func TestACancellerCancelsOnceAndRunsItsHookOnce(t *testing.T) {
	var c canceller
	h := &hookCounter{}
	if !c.onCancel(h) || c.err() != nil {
		t.Fatal("a fresh canceller is not cancelled")
	}
	first := errors.New("first")
	c.cancel(first)
	c.cancel(errors.New("second"))
	if len(h.causes) != 1 || h.causes[0] != first || c.err() != first {
		t.Fatalf("hook got %v, err %v; want the first cause once", h.causes, c.err())
	}
	late := &hookCounter{}
	if c.onCancel(late) || len(late.causes) != 1 || late.causes[0] != first {
		t.Fatalf("a hook set after the cancel runs at once with its cause: %v", late.causes)
	}
	if c.stop() {
		t.Fatal("stop after the cancel says it came first")
	}
}

func TestACancellerStoppedRunsNoHookAndANilCauseIsCanceled(t *testing.T) {
	var c canceller
	h := &hookCounter{}
	c.onCancel(h)
	if !c.stop() {
		t.Fatal("stop before any cancel")
	}
	c.cancel(nil)
	if len(h.causes) != 0 || !errors.Is(c.err(), context.Canceled) {
		t.Fatalf("hook got %v, err %v", h.causes, c.err())
	}
}

func TestATryBegunUnderACancelledRequestIsCancelled(t *testing.T) {
	var request, try canceller
	cause := errors.New("client left")
	try.begin(&request)
	request.cancel(cause)
	if try.err() != cause {
		t.Fatalf("a request's cancel reaches its try: %v", try.err())
	}
	try.begin(&request) // the next try, after the request was cancelled
	if try.err() != cause {
		t.Fatalf("a try begun after the request's cancel starts cancelled: %v", try.err())
	}
	var other canceller
	try.begin(&other)
	try.cancel(errWorkerDown) // the waiting list cancels the try alone
	if other.err() != nil {
		t.Fatal("a try's cancel reached its request")
	}
}

func TestAContextOfACancellerEndsWithIt(t *testing.T) {
	var c canceller
	ctx, stop := contextOf(&c)
	defer stop()
	c.cancel(errWorkerDown)
	if context.Cause(ctx) != errWorkerDown {
		t.Fatalf("context cause %v", context.Cause(ctx))
	}
}
