package gateway

import (
	"context"
	"sync"
)

// canceller cancels one thing once, without a context: a context per request and per try, with
// their children and hooks, made a fifth of the proxy's allocations (BENCHMARKS.md, "The gateway
// on fasthttp"). The first cancel sets the cause and runs the hook, if one is set: a try's closes
// its connection, an exchange's cancels its current try.
type canceller struct {
	mu    sync.Mutex
	cause error
	hook  cancelHook
}

// cancelHook is what a cancel reaches: a pointer, so that setting it allocates nothing.
type cancelHook interface{ cancelled(cause error) }

// cancel cancels with cause (context.Canceled when nil) unless already cancelled.
func (c *canceller) cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	if c.cause != nil {
		c.mu.Unlock()
		return
	}
	c.cause = cause
	hook := c.hook
	c.hook = nil
	c.mu.Unlock()
	if hook != nil {
		hook.cancelled(cause)
	}
}

func (c *canceller) cancelled(cause error) { c.cancel(cause) }

// err is the cause of the cancel, nil before it.
func (c *canceller) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// onCancel sets the hook a cancel runs; when the cancel came first it runs it at once and
// returns false.
func (c *canceller) onCancel(hook cancelHook) bool {
	c.mu.Lock()
	cause := c.cause
	if cause == nil {
		c.hook = hook
	}
	c.mu.Unlock()
	if cause != nil {
		hook.cancelled(cause)
		return false
	}
	return true
}

// stop removes the hook; it returns false when the cancel came first (the hook ran, or runs).
func (c *canceller) stop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hook = nil
	return c.cause == nil
}

// begin makes c a fresh canceller for a new try under parent: cancelled at once if parent is
// already, and by parent's cancel from then on.
func (c *canceller) begin(parent *canceller) {
	c.mu.Lock()
	c.cause, c.hook = nil, nil
	c.mu.Unlock()
	parent.onCancel(c)
}

// contextOf is a context cancelled with c, for the calls that need one (a dial, a wait for a
// connection): its stop ends the link. It takes c's hook, so it is called only while c has none
// (before a try's connection is set as its hook).
func contextOf(c *canceller) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	hook := causeFunc(cancel)
	c.onCancel(hook)
	return ctx, func() {
		c.stop()
		cancel(nil)
	}
}

type causeFunc context.CancelCauseFunc

func (f causeFunc) cancelled(cause error) { f(cause) }
