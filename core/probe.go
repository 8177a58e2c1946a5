package core

import (
	"strings"
	"time"
)

// HealthCheckConfig is the active health check (contract: Worker failures): a GET of Endpoint
// on every worker every Interval, each given Timeout; FailureThreshold failed probes in a row make
// a worker unhealthy, SuccessThreshold good ones healthy again. The core keeps the thresholds'
// state machine; the probes themselves are the health package's.
type HealthCheckConfig struct {
	Disabled         bool
	Endpoint         string
	Interval         time.Duration
	Timeout          time.Duration
	FailureThreshold int
	SuccessThreshold int
}

// The health check's defaults: SMG's endpoint and thresholds, and an interval and timeout of a
// second, so that a dead worker is flagged within about three seconds (SMG probes every 60).
// Engines answer /health from their HTTP thread in milliseconds even while busy, and a probe a
// second per worker is a negligible load.
const (
	DefaultHealthEndpoint         = "/health"
	DefaultHealthInterval         = time.Second
	DefaultHealthTimeout          = time.Second
	DefaultHealthFailureThreshold = 3
	DefaultHealthSuccessThreshold = 2
	// MaxHealthEndpointLength bounds the probed path.
	MaxHealthEndpointLength = 1024
)

// DefaultHealthCheckConfig is the health check with its defaults, enabled.
func DefaultHealthCheckConfig() HealthCheckConfig {
	return HealthCheckConfig{Endpoint: DefaultHealthEndpoint, Interval: DefaultHealthInterval, Timeout: DefaultHealthTimeout,
		FailureThreshold: DefaultHealthFailureThreshold, SuccessThreshold: DefaultHealthSuccessThreshold}
}

// Validate checks every setting, naming SMG's flags.
func (c *HealthCheckConfig) Validate() error {
	if err := checkHealthEndpoint(c.Endpoint); err != nil {
		return err
	}
	for _, d := range [...]struct {
		name string
		d    time.Duration
	}{{"health_check_interval_secs", c.Interval}, {"health_check_timeout_secs", c.Timeout}} {
		if err := checkDuration(d.name, d.d); err != nil {
			return err
		}
	}
	if err := checkThreshold("health_failure_threshold", c.FailureThreshold); err != nil {
		return err
	}
	return checkThreshold("health_success_threshold", c.SuccessThreshold)
}

// checkHealthEndpoint accepts an absolute path of visible ASCII, without a query's '?' or a
// fragment's '#' being the only content, as a request line carries it.
func checkHealthEndpoint(path string) error {
	ok := strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "//") && len(path) <= MaxHealthEndpointLength && !strings.Contains(path, "#")
	for i := 0; ok && i < len(path); i++ {
		ok = path[i] > 0x20 && path[i] < 0x7f
	}
	if !ok {
		return invalid("health_check_endpoint must be a path that starts with a single '/' (at most %d visible ASCII characters, no '#'), got %q", MaxHealthEndpointLength, path)
	}
	return nil
}

// probeState counts one worker's probes in a row.
type probeState struct {
	down                bool
	failures, successes int
}

// record applies one probe result; the router compares the worker's condition before and after.
func (p *probeState) record(ok bool, c *HealthCheckConfig) {
	if ok {
		p.failures = 0
		p.successes++
		if p.down && p.successes >= c.SuccessThreshold {
			p.down, p.successes = false, 0
		}
		return
	}
	p.successes = 0
	p.failures++
	if p.failures >= c.FailureThreshold {
		p.down = true
	}
}
