package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bounded-router/bounded-router/internal/strictjson"
)

// Defaults of bounded_consistent_hashing (docs/contract.md, "The bounded rule").
const (
	DefaultMaxLoadSkew = 1.5
	DefaultMinLoadGap  = 2
)

// Limits (docs/contract.md, "Validation"): a typo or a huge membership must be refused, not
// exhaust memory building the ring (about 14 bytes per entry, twice that while it is built).
const (
	MaxVirtualNodes = 65536
	MaxRingEntries  = 1 << 22
	MaxMinLoadGap   = math.MaxInt64
	// MaxKeyMemory bounds key_memory, whose entries are all allocated when the router is built.
	MaxKeyMemory = 1 << 22
	// MaxBlocksPerWorker bounds blocks_per_worker: a million blocks of 16 tokens is more KV
	// cache than one serving node holds today.
	MaxBlocksPerWorker = 1 << 20
)

// DefaultBlocksPerWorker is cache_aware's default blocks_per_worker: half a million tokens of
// KV cache in blocks of 16 tokens, a large GPU's worth (docs/contract.md, "cache_aware").
const DefaultBlocksPerWorker = 1 << 15

// DefaultCacheThreshold is cache_aware's default cache_threshold, SMG's default: a prefix hit
// needs more than 30% of the request's blocks matched.
const DefaultCacheThreshold = 0.3

var (
	virtualNodesRule   = fmt.Sprintf("from 1 to %d", MaxVirtualNodes)
	spillTargetRule    = strings.Join(spillTargetNames[:], ", ")
	balanceByRule      = strings.Join(loadMeasureNames[:], ", ")
	keyMemoryRule      = fmt.Sprintf("from 0 to %d", MaxKeyMemory)
	maxKeysRule        = fmt.Sprintf("from 1 to %d", MaxManualKeys)
	assignmentModeRule = strings.Join(assignmentModeNames[:], ", ")
	blocksRule         = fmt.Sprintf("from 1 to %d", MaxBlocksPerWorker)
	policyRule         = strings.Join(policyNames[:], ", ")
)

// checkRingSize refuses a membership of workers whose ring would exceed MaxRingEntries.
func checkRingSize(workers, virtualNodes int) error {
	if workers > MaxRingEntries/virtualNodes {
		return invalid("%d workers x %d virtual_nodes is more than %d ring entries: use fewer virtual_nodes or fewer workers",
			workers, virtualNodes, MaxRingEntries)
	}
	return nil
}

// Config describes a router: its workers, its policy, the ring's virtual nodes per worker and
// the names of the headers that carry the explicit routing key.
type Config struct {
	WorkerURLs   []string
	Policy       Policy
	VirtualNodes int
	// RoutingKeyHeaders are the header names consulted for the explicit routing key, in order
	// (see CheckRoutingKeyHeaders); nil is DefaultRoutingKeyHeaders.
	RoutingKeyHeaders []string
	// HealthCheck is the active health check, nil for none; Breaker the circuit breaker of every
	// worker, nil for its defaults (contract: Worker failures).
	HealthCheck *HealthCheckConfig
	Breaker     *BreakerConfig
}

// HealthCheckOrOff is the health check's settings, Disabled when there is none.
func (c *Config) HealthCheckOrOff() HealthCheckConfig {
	if c.HealthCheck == nil {
		off := DefaultHealthCheckConfig()
		off.Disabled = true
		return off
	}
	return *c.HealthCheck
}

// BreakerOrDefault is the circuit breaker's settings, the defaults when none are given.
func (c *Config) BreakerOrDefault() BreakerConfig {
	if c.Breaker == nil {
		return DefaultBreakerConfig()
	}
	return *c.Breaker
}

// DefaultConfig is a bounded_consistent_hashing router with the default settings.
func DefaultConfig(workerURLs ...string) Config {
	return Config{
		WorkerURLs:   workerURLs,
		Policy:       Policy{Kind: PolicyBoundedConsistentHashing, MaxLoadSkew: DefaultMaxLoadSkew, MinLoadGap: DefaultMinLoadGap},
		VirtualNodes: DefaultVirtualNodes,
	}
}

// Validate checks every setting and returns an error naming the first one that breaks its rule.
func (c *Config) Validate() error {
	if c.VirtualNodes < 1 || c.VirtualNodes > MaxVirtualNodes {
		return invalid("virtual_nodes must be an integer %s, got %d", virtualNodesRule, c.VirtualNodes)
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if c.RoutingKeyHeaders != nil {
		if err := CheckRoutingKeyHeaders(c.RoutingKeyHeaders); err != nil {
			return err
		}
	}
	if err := checkRingSize(len(c.WorkerURLs), c.VirtualNodes); err != nil {
		return err
	}
	if c.HealthCheck != nil && !c.HealthCheck.Disabled {
		if err := c.HealthCheck.Validate(); err != nil {
			return err
		}
	}
	if c.Breaker != nil && !c.Breaker.Disabled {
		if err := c.Breaker.Validate(); err != nil {
			return err
		}
	}
	_, err := normalizeWorkerURLs(c.WorkerURLs)
	return err
}

// Validate checks the policy's settings.
func (p *Policy) Validate() error {
	if int(p.Kind) >= len(policyNames) {
		return invalid("unknown policy kind %d", p.Kind)
	}
	if int(p.HashRing) >= len(hashRingNames) {
		return invalid("unknown hash_ring %d", p.HashRing)
	}
	if p.HashRing != HashRingXXH64 && !p.Kind.hashes() {
		return invalid("hash_ring applies only to %s, not %s", hashingPolicies, p.Kind)
	}
	if p.HasSeed && p.Kind != PolicyRandom {
		return invalid("seed applies only to random, not %s", p.Kind)
	}
	if p.Kind == PolicyManual {
		return p.validateManual()
	}
	if p.AssignmentMode != AssignRandom || p.MaxKeys != 0 {
		return invalid("assignment_mode and max_keys apply only to manual, not %s", p.Kind)
	}
	if !p.Kind.bounds() {
		return nil
	}
	if math.IsNaN(p.MaxLoadSkew) || math.IsInf(p.MaxLoadSkew, 0) || p.MaxLoadSkew < 1 {
		return invalid("max_load_skew must be a finite number >= 1.0, got %v", p.MaxLoadSkew)
	}
	if p.MinLoadGap < 0 {
		return invalid("min_load_gap must be an integer >= 0, got %d", p.MinLoadGap)
	}
	if int(p.BalanceBy) >= len(loadMeasureNames) {
		return invalid("balance_by must be one of %s, got %d", balanceByRule, p.BalanceBy)
	}
	if p.Kind == PolicyCacheAware {
		if p.CacheAware.BlocksPerWorker < 1 || p.CacheAware.BlocksPerWorker > MaxBlocksPerWorker {
			return invalid("blocks_per_worker must be an integer %s, got %d", blocksRule, p.CacheAware.BlocksPerWorker)
		}
		if !(p.CacheAware.CacheThreshold >= 0 && p.CacheAware.CacheThreshold <= 1) {
			return invalid("cache_threshold must be a number from 0.0 to 1.0, got %v", p.CacheAware.CacheThreshold)
		}
		return p.CacheAware.validateHitWait(p.BalanceBy)
	}
	if int(p.SpillTarget) >= len(spillTargetNames) {
		return invalid("spill_target must be one of %s, got %d", spillTargetRule, p.SpillTarget)
	}
	if p.KeyMemory < 0 || p.KeyMemory > MaxKeyMemory {
		return invalid("key_memory must be an integer %s, got %d", keyMemoryRule, p.KeyMemory)
	}
	return nil
}

// validateHitWait checks hit_wait_factor, which weighs the prefill queue and so needs
// balance_by prefill (docs/contract.md, "Prefill load", rule 5).
func (s *CacheAwareSettings) validateHitWait(by LoadMeasure) error {
	f := s.HitWaitFactor
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return invalid("hit_wait_factor must be a finite number >= 0, got %v", f)
	}
	if f != 0 && by != LoadPrefill {
		return invalid("hit_wait_factor applies only with balance_by prefill, got balance_by %s", by)
	}
	return nil
}

func (p *Policy) validateManual() error {
	if int(p.AssignmentMode) >= len(assignmentModeNames) {
		return invalid("assignment_mode must be one of %s, got %d", assignmentModeRule, p.AssignmentMode)
	}
	if p.MaxKeys < 1 || p.MaxKeys > MaxManualKeys {
		return invalid("max_keys must be an integer %s, got %d", maxKeysRule, p.MaxKeys)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// policyJSON is the {"type": ...} form of a policy, as SMG's PolicyConfig serialises it.
type policyJSON struct {
	Type        string          `json:"type"`
	MaxLoadSkew json.RawMessage `json:"max_load_skew,omitempty"`
	MinLoadGap  json.RawMessage `json:"min_load_gap,omitempty"`
	HashRing    json.RawMessage `json:"hash_ring,omitempty"`
	SpillTarget json.RawMessage `json:"spill_target,omitempty"`
	BalanceBy   json.RawMessage `json:"balance_by,omitempty"`
	KeyMemory   json.RawMessage `json:"key_memory,omitempty"`
	Seed        json.RawMessage `json:"seed,omitempty"`
	Blocks      json.RawMessage `json:"blocks_per_worker,omitempty"`
	// CacheThreshold is cache_aware's, named as SMG's; HitWaitFactor is cache_aware's too.
	CacheThreshold json.RawMessage `json:"cache_threshold,omitempty"`
	HitWaitFactor  json.RawMessage `json:"hit_wait_factor,omitempty"`
	// AssignmentMode and MaxKeys are manual's.
	AssignmentMode json.RawMessage `json:"assignment_mode,omitempty"`
	MaxKeys        json.RawMessage `json:"max_keys,omitempty"`
}

type configJSON struct {
	WorkerURLs        []string        `json:"worker_urls"`
	Policy            json.RawMessage `json:"policy"`
	VirtualNodes      json.RawMessage `json:"virtual_nodes,omitempty"`
	RoutingKeyHeaders json.RawMessage `json:"routing_key_headers,omitempty"`
	HealthCheck       json.RawMessage `json:"health_check,omitempty"`
	CircuitBreaker    json.RawMessage `json:"circuit_breaker,omitempty"`
}

// healthCheckJSON and circuitBreakerJSON are the settings objects of "health_check" and
// "circuit_breaker"; an omitted setting keeps its default.
type healthCheckJSON struct {
	Endpoint         *string  `json:"endpoint"`
	IntervalSecs     *float64 `json:"interval_secs"`
	TimeoutSecs      *float64 `json:"timeout_secs"`
	FailureThreshold *int     `json:"failure_threshold"`
	SuccessThreshold *int     `json:"success_threshold"`
}

type circuitBreakerJSON struct {
	FailureThreshold    *int     `json:"failure_threshold"`
	SuccessThreshold    *int     `json:"success_threshold"`
	TimeoutDurationSecs *float64 `json:"timeout_duration_secs"`
}

// hashingPolicies names the policies with a hash_ring setting, for errors.
const hashingPolicies = "consistent_hashing, bounded_consistent_hashing and cache_aware"

// ParseConfig reads a configuration such as
//
//	{"worker_urls": ["http://w0:8000"], "virtual_nodes": 150,
//	 "policy": {"type": "bounded_consistent_hashing", "max_load_skew": 1.5, "min_load_gap": 2,
//	            "hash_ring": "xxh64", "spill_target": "clockwise", "key_memory": 0},
//	 "routing_key_headers": ["X-SMG-Routing-Key"]}
//
// Omitted settings take their defaults; unknown fields and wrongly typed values are errors.
func ParseConfig(data []byte) (Config, error) {
	var raw configJSON
	if err := decodeStrict(data, &raw); err != nil {
		return Config{}, invalid("router config: %v", err)
	}
	cfg := DefaultConfig(raw.WorkerURLs...)
	var err error
	if cfg.VirtualNodes, err = intSetting("virtual_nodes", virtualNodesRule, raw.VirtualNodes, DefaultVirtualNodes); err != nil {
		return Config{}, err
	}
	if cfg.Policy, err = ParsePolicy(raw.Policy); err != nil {
		return Config{}, err
	}
	if cfg.RoutingKeyHeaders, err = routingKeyHeadersSetting(raw.RoutingKeyHeaders); err != nil {
		return Config{}, err
	}
	if cfg.HealthCheck, err = healthCheckSetting(raw.HealthCheck); err != nil {
		return Config{}, err
	}
	if cfg.Breaker, err = circuitBreakerSetting(raw.CircuitBreaker); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// ParsePolicy reads a policy in its {"type": ...} form; an absent policy is the default one.
func ParsePolicy(data []byte) (Policy, error) {
	policy := DefaultConfig().Policy
	if len(data) == 0 || string(data) == "null" {
		return policy, nil
	}
	var raw policyJSON
	if err := decodeStrict(data, &raw); err != nil {
		return Policy{}, invalid("policy: %v", err)
	}
	kind, ok := policyKindByName(raw.Type)
	if !ok && smgOnly(raw.Type) {
		return Policy{}, invalid("policy type %q exists in SMG but is not implemented by bounded-router: use one of %s", raw.Type, policyRule)
	}
	if !ok {
		return Policy{}, invalid("policy type must be one of %s, got %q", policyRule, raw.Type)
	}
	if kind != PolicyManual && (raw.AssignmentMode != nil || raw.MaxKeys != nil) {
		return Policy{}, invalid("assignment_mode and max_keys apply only to manual, not %s", kind)
	}
	if raw.HashRing != nil && !kind.hashes() {
		return Policy{}, invalid("hash_ring applies only to %s, not %s", hashingPolicies, kind)
	}
	hash, err := hashRingSetting(raw.HashRing)
	if err != nil {
		return Policy{}, err
	}
	if raw.Seed != nil {
		if kind != PolicyRandom {
			return Policy{}, invalid("seed applies only to random, not %s", kind)
		}
		return seededRandom(raw.Seed)
	}
	if !kind.bounds() && (raw.MaxLoadSkew != nil || raw.MinLoadGap != nil) {
		return Policy{}, invalid("max_load_skew and min_load_gap apply only to bounded_consistent_hashing and cache_aware, not %s", kind)
	}
	if !kind.bounds() && raw.BalanceBy != nil {
		return Policy{}, invalid("balance_by applies only to bounded_consistent_hashing and cache_aware, not %s", kind)
	}
	if kind != PolicyBoundedConsistentHashing && (raw.SpillTarget != nil || raw.KeyMemory != nil) {
		return Policy{}, invalid("spill_target and key_memory apply only to bounded_consistent_hashing, not %s", kind)
	}
	if kind != PolicyCacheAware && (raw.Blocks != nil || raw.CacheThreshold != nil || raw.HitWaitFactor != nil) {
		return Policy{}, invalid("blocks_per_worker, cache_threshold and hit_wait_factor apply only to cache_aware, not %s", kind)
	}
	if kind == PolicyManual {
		return manualSettings(&raw)
	}
	if !kind.bounds() {
		return Policy{Kind: kind, HashRing: hash}, nil
	}
	policy.Kind, policy.HashRing = kind, hash
	if raw.MaxLoadSkew != nil {
		// Unmarshalling null into a float64 is a silent no-op; null is not a number.
		if isNull(raw.MaxLoadSkew) || json.Unmarshal(raw.MaxLoadSkew, &policy.MaxLoadSkew) != nil {
			return Policy{}, invalid("max_load_skew must be a finite number >= 1.0, got %s", raw.MaxLoadSkew)
		}
	}
	gap, err := intSetting("min_load_gap", ">= 0", raw.MinLoadGap, DefaultMinLoadGap)
	if err != nil {
		return Policy{}, err
	}
	policy.MinLoadGap = int64(gap)
	if policy.SpillTarget, err = namedSetting[SpillTarget]("spill_target", spillTargetRule, spillTargetNames[:], raw.SpillTarget); err != nil {
		return Policy{}, err
	}
	if policy.BalanceBy, err = namedSetting[LoadMeasure]("balance_by", balanceByRule, loadMeasureNames[:], raw.BalanceBy); err != nil {
		return Policy{}, err
	}
	if policy.KeyMemory, err = intSetting("key_memory", keyMemoryRule, raw.KeyMemory, 0); err != nil {
		return Policy{}, err
	}
	if kind == PolicyCacheAware {
		if policy.CacheAware.BlocksPerWorker, err = intSetting("blocks_per_worker", blocksRule, raw.Blocks, DefaultBlocksPerWorker); err != nil {
			return Policy{}, err
		}
		policy.CacheAware.CacheThreshold = DefaultCacheThreshold
		// Unmarshalling null into a float64 is a silent no-op; null is not a number.
		if raw.CacheThreshold != nil && (isNull(raw.CacheThreshold) || json.Unmarshal(raw.CacheThreshold, &policy.CacheAware.CacheThreshold) != nil) {
			return Policy{}, invalid("cache_threshold must be a number from 0.0 to 1.0, got %s", raw.CacheThreshold)
		}
		if raw.HitWaitFactor != nil && (isNull(raw.HitWaitFactor) || json.Unmarshal(raw.HitWaitFactor, &policy.CacheAware.HitWaitFactor) != nil) {
			return Policy{}, invalid("hit_wait_factor must be a finite number >= 0, got %s", raw.HitWaitFactor)
		}
	}
	return policy, policy.Validate()
}

// manualSettings decodes manual's settings; absent ones take their defaults.
func manualSettings(raw *policyJSON) (Policy, error) {
	policy := Policy{Kind: PolicyManual}
	var err error
	if policy.AssignmentMode, err = assignmentModeSetting(raw.AssignmentMode); err != nil {
		return Policy{}, err
	}
	if policy.MaxKeys, err = intSetting("max_keys", maxKeysRule, raw.MaxKeys, DefaultMaxKeys); err != nil {
		return Policy{}, err
	}
	return policy, policy.Validate()
}

// assignmentModeSetting decodes assignment_mode, one of the names of AssignmentMode; SMG's other
// modes are refused with an error that says so.
func assignmentModeSetting(raw json.RawMessage) (AssignmentMode, error) {
	if raw == nil {
		return AssignRandom, nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		for m, n := range assignmentModeNames {
			if n == name {
				return AssignmentMode(m), nil
			}
		}
		for _, n := range smgOnlyAssignmentModes {
			if n == name {
				return 0, invalid("assignment_mode %q exists in SMG but is not implemented by bounded-router: use one of %s", name, assignmentModeRule)
			}
		}
	}
	return 0, invalid("assignment_mode must be one of %s, got %s", assignmentModeRule, raw)
}

// routingKeyHeadersSetting decodes routing_key_headers, a JSON array of header names; absent
// is nil (the default names). CheckRoutingKeyHeaders checks the names.
func routingKeyHeadersSetting(raw json.RawMessage) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	var names []string
	if isNull(raw) || json.Unmarshal(raw, &names) != nil {
		return nil, invalid("routing_key_headers must be a JSON array of header names, got %s", raw)
	}
	if names == nil {
		names = []string{}
	}
	return names, CheckRoutingKeyHeaders(names)
}

// hashRingSetting decodes hash_ring: absent is the default ring, else one of hashRingNames.
func hashRingSetting(raw json.RawMessage) (HashRing, error) {
	if raw == nil {
		return HashRingXXH64, nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		for h, n := range hashRingNames {
			if n == name {
				return HashRing(h), nil
			}
		}
	}
	return 0, invalid(`hash_ring must be "xxh64" or "smg", got %s`, raw)
}

// seededRandom is the random policy with the seed setting raw, an integer from 0 to 2^64-1.
func seededRandom(raw json.RawMessage) (Policy, error) {
	p := Policy{Kind: PolicyRandom, HasSeed: true}
	if isNull(raw) || bytes.ContainsAny(raw, ".eE") || json.Unmarshal(raw, &p.Seed) != nil {
		return Policy{}, invalid("seed must be an integer from 0 to %d, got %s", uint64(math.MaxUint64), raw)
	}
	return p, nil
}

// namedSetting decodes a setting that is one of names (absent: value 0, the default); field
// and rule name it in the error.
func namedSetting[T ~uint8](field, rule string, names []string, raw json.RawMessage) (T, error) {
	if raw == nil {
		return 0, nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		for v, n := range names {
			if n == name {
				return T(v), nil
			}
		}
	}
	return 0, invalid("%s must be one of %s, got %s", field, rule, raw)
}

// healthCheckSetting reads "health_check": absent, null or false is none, true the defaults, an
// object the defaults with its settings.
func healthCheckSetting(raw json.RawMessage) (*HealthCheckConfig, error) {
	c := DefaultHealthCheckConfig()
	on, settings, err := switchedSetting("health_check", raw, false)
	if err != nil || !on {
		return nil, err
	}
	if settings == nil {
		return &c, nil
	}
	var j healthCheckJSON
	if err := decodeStrict(settings, &j); err != nil {
		return nil, invalid("health_check: %v", err)
	}
	setString(&c.Endpoint, j.Endpoint)
	setSeconds(&c.Interval, j.IntervalSecs)
	setSeconds(&c.Timeout, j.TimeoutSecs)
	setInt(&c.FailureThreshold, j.FailureThreshold)
	setInt(&c.SuccessThreshold, j.SuccessThreshold)
	return &c, nil
}

// circuitBreakerSetting reads "circuit_breaker": absent or null is none given (the defaults),
// true the defaults, false off, an object the defaults with its settings.
func circuitBreakerSetting(raw json.RawMessage) (*BreakerConfig, error) {
	c := DefaultBreakerConfig()
	on, settings, err := switchedSetting("circuit_breaker", raw, true)
	switch {
	case err != nil || len(raw) == 0 || isNull(raw):
		return nil, err
	case !on:
		c.Disabled = true
		return &c, nil
	case settings == nil:
		return &c, nil
	}
	var j circuitBreakerJSON
	if err := decodeStrict(settings, &j); err != nil {
		return nil, invalid("circuit_breaker: %v", err)
	}
	setInt(&c.FailureThreshold, j.FailureThreshold)
	setInt(&c.SuccessThreshold, j.SuccessThreshold)
	setSeconds(&c.Timeout, j.TimeoutDurationSecs)
	return &c, nil
}

// switchedSetting reads a setting that is a boolean or an object of settings: whether it is on,
// and the object (nil for a boolean or an absent setting, which is on when fallback is).
func switchedSetting(name string, raw json.RawMessage, fallback bool) (on bool, settings json.RawMessage, err error) {
	switch text := string(bytes.TrimSpace(raw)); {
	case len(raw) == 0 || text == "null":
		return fallback, nil, nil
	case text == "true":
		return true, nil, nil
	case text == "false":
		return false, nil, nil
	case strings.HasPrefix(text, "{"):
		return true, raw, nil
	default:
		return false, nil, invalid("%s must be true, false or an object of settings, got %s", name, text)
	}
}

func setString(into *string, v *string) {
	if v != nil {
		*into = *v
	}
}

func setInt(into *int, v *int) {
	if v != nil {
		*into = *v
	}
}

// setSeconds sets a duration given in seconds, its sign kept for the error Validate gives; a value
// too large for a Duration becomes one that Validate refuses, never a wrapped-around one.
func setSeconds(into *time.Duration, secs *float64) {
	switch {
	case secs == nil:
	case math.IsNaN(*secs):
		*into = 0
	case math.Abs(*secs) > MaxHealthDuration.Seconds():
		*into = time.Duration(math.Copysign(float64(MaxHealthDuration+time.Second), *secs))
	default:
		*into = time.Duration(*secs * float64(time.Second))
	}
}

// ParseWorkerURLs reads a JSON array of worker URLs, as strictly as ParseConfig reads its list.
func ParseWorkerURLs(data []byte) ([]string, error) {
	var urls []string
	err := decodeStrict(data, &urls)
	if err == nil && urls == nil { // null, which json.Unmarshal takes for an empty list
		err = fmt.Errorf("got null")
	}
	if err != nil {
		return nil, invalid("worker URLs must be a JSON array of strings: %v", err)
	}
	return urls, nil
}

func policyKindByName(name string) (PolicyKind, bool) {
	for kind, n := range policyNames {
		if n == name {
			return PolicyKind(kind), true
		}
	}
	return 0, false
}

// intSetting decodes an integer setting, rejecting fractions, exponents, booleans, strings and
// null (which json.Unmarshal would silently accept, leaving 0).
func intSetting(name, rule string, raw json.RawMessage, fallback int) (int, error) {
	if raw == nil {
		return fallback, nil
	}
	var n int
	if isNull(raw) || bytes.ContainsAny(raw, ".eE") || json.Unmarshal(raw, &n) != nil {
		return 0, invalid("%s must be an integer %s, got %s", name, rule, raw)
	}
	return n, nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// MarshalJSON writes the {"type": ...} form ParsePolicy reads. The options of
// bounded_consistent_hashing appear only when they differ from their defaults, so a default
// policy is written as before they existed; cache_aware writes all its settings.
func (p Policy) MarshalJSON() ([]byte, error) {
	out := map[string]any{"type": p.Kind.String()}
	if p.Kind.hashes() {
		out["hash_ring"] = p.HashRing.String()
	}
	if p.HasSeed {
		out["seed"] = p.Seed
	}
	if p.Kind.bounds() {
		out["max_load_skew"], out["min_load_gap"] = p.MaxLoadSkew, p.MinLoadGap
		if p.BalanceBy != LoadInFlight {
			out["balance_by"] = p.BalanceBy.String()
		}
	}
	if p.Kind == PolicyCacheAware {
		out["blocks_per_worker"], out["cache_threshold"] = p.CacheAware.BlocksPerWorker, p.CacheAware.CacheThreshold
		if p.CacheAware.HitWaitFactor != 0 {
			out["hit_wait_factor"] = p.CacheAware.HitWaitFactor
		}
	}
	if p.Kind == PolicyBoundedConsistentHashing {
		if p.SpillTarget != SpillClockwise {
			out["spill_target"] = p.SpillTarget.String()
		}
		if p.KeyMemory != 0 {
			out["key_memory"] = p.KeyMemory
		}
	}
	if p.Kind == PolicyManual {
		out["assignment_mode"], out["max_keys"] = p.AssignmentMode.String(), p.MaxKeys
	}
	return json.Marshal(out)
}

// MarshalJSON writes the form ParseConfig reads.
func (c Config) MarshalJSON() ([]byte, error) {
	urls := c.WorkerURLs
	if urls == nil {
		urls = []string{}
	}
	out := map[string]any{"worker_urls": urls, "policy": c.Policy, "virtual_nodes": c.VirtualNodes}
	// Only names that were set appear, so a default config is written as before.
	if c.RoutingKeyHeaders != nil {
		out["routing_key_headers"] = c.RoutingKeyHeaders
	}
	if h := c.HealthCheck; h != nil && !h.Disabled {
		out["health_check"] = map[string]any{"endpoint": h.Endpoint, "interval_secs": h.Interval.Seconds(), "timeout_secs": h.Timeout.Seconds(),
			"failure_threshold": h.FailureThreshold, "success_threshold": h.SuccessThreshold}
	}
	if b := c.Breaker; b != nil && b.Disabled {
		out["circuit_breaker"] = false
	} else if b != nil {
		out["circuit_breaker"] = map[string]any{"failure_threshold": b.FailureThreshold, "success_threshold": b.SuccessThreshold, "timeout_duration_secs": b.Timeout.Seconds()}
	}
	return json.Marshal(out)
}

// fieldNames are the object keys of every JSON form the core reads, spelled exactly.
var fieldNames = strictjson.Names("worker_urls", "policy", "virtual_nodes", "type", "max_load_skew", "min_load_gap",
	"spill_target", "balance_by", "key_memory", "seed", "assignment_mode", "max_keys", "routing_key_headers",
	"blocks_per_worker", "cache_threshold", "hit_wait_factor", "health_check", "circuit_breaker", "endpoint", "interval_secs",
	"timeout_secs", "failure_threshold", "success_threshold", "timeout_duration_secs")

// decodeStrict decodes exactly the documented form of a JSON text the core reads.
func decodeStrict(data []byte, into any) error { return strictjson.Decode(data, into, fieldNames) }
