package core

import "time"

// BreakerConfig is the circuit breaker of every worker (contract: Worker failures): after
// FailureThreshold failed requests in a row the worker is ejected for Timeout, then half-open
// (routable, but no spill target) until SuccessThreshold successes in a row close it again; a
// failure while half-open ejects it again.
type BreakerConfig struct {
	Disabled         bool
	FailureThreshold int
	SuccessThreshold int
	Timeout          time.Duration
}

// The breaker's defaults. Five failures in a row is Envoy's consecutive_5xx; a ten-second
// ejection lets a restarted worker back within seconds (SMG waits 60).
const (
	DefaultBreakerFailureThreshold = 5
	DefaultBreakerSuccessThreshold = 2
	DefaultBreakerTimeout          = 10 * time.Second
	// MaxThreshold bounds every failure and success threshold.
	MaxThreshold = 1000
	// MaxHealthDuration bounds the breaker's timeout and the probes' interval and timeout.
	MaxHealthDuration = 24 * time.Hour
)

// DefaultBreakerConfig is the breaker with its defaults, enabled.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{FailureThreshold: DefaultBreakerFailureThreshold, SuccessThreshold: DefaultBreakerSuccessThreshold, Timeout: DefaultBreakerTimeout}
}

// Validate checks the thresholds and the timeout, naming SMG's flags.
func (c *BreakerConfig) Validate() error {
	if err := checkThreshold("cb_failure_threshold", c.FailureThreshold); err != nil {
		return err
	}
	if err := checkThreshold("cb_success_threshold", c.SuccessThreshold); err != nil {
		return err
	}
	return checkDuration("cb_timeout_duration_secs", c.Timeout)
}

func checkThreshold(name string, n int) error {
	if n < 1 || n > MaxThreshold {
		return invalid("%s must be an integer from 1 to %d, got %d", name, MaxThreshold, n)
	}
	return nil
}

func checkDuration(name string, d time.Duration) error {
	if d <= 0 || d > MaxHealthDuration {
		return invalid("%s must be a number of seconds > 0 and at most %v, got %v", name, MaxHealthDuration.Seconds(), d.Seconds())
	}
	return nil
}

type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

// breaker is one worker's circuit breaker: a small state machine driven by outcomes and by the
// clock, which callers pass in (the core reads no clock).
type breaker struct {
	state breakerState
	// failures counts failures in a row while closed; successes counts successes in a row while
	// half-open.
	failures, successes int
	openUntil           time.Time
	ejections           uint64
}

// record applies one outcome; the router compares the worker's condition before and after.
func (b *breaker) record(o Outcome, c *BreakerConfig, now time.Time) {
	switch {
	case c.Disabled || o == OutcomePushback || o == OutcomeNeutral || b.state == breakerOpen:
		// An outcome while ejected is of a request already on its way when the worker was ejected.
	case o == OutcomeFailure:
		b.failures++
		b.successes = 0
		if b.state == breakerHalfOpen || b.failures >= c.FailureThreshold {
			b.state, b.openUntil, b.failures = breakerOpen, now.Add(c.Timeout), 0
			b.ejections++
		}
	case b.state == breakerHalfOpen:
		b.successes++
		if b.successes >= c.SuccessThreshold {
			b.state, b.successes = breakerClosed, 0
		}
	default:
		b.failures = 0
	}
}

// expire turns an ejection that has run its time into half-open and reports whether it did.
func (b *breaker) expire(now time.Time) bool {
	if b.state != breakerOpen || now.Before(b.openUntil) {
		return false
	}
	b.state, b.successes = breakerHalfOpen, 0
	return true
}

// trusted reports whether the breaker has nothing against the worker: closed, with no
// failure since its last success.
func (b *breaker) trusted() bool { return b.state == breakerClosed && b.failures == 0 }
