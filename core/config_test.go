package core

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig("http://a", "http://b")
	assert.Equal(t, Config{
		WorkerURLs:   []string{"http://a", "http://b"},
		Policy:       Policy{Kind: PolicyBoundedConsistentHashing, MaxLoadSkew: 1.5, MinLoadGap: 2},
		VirtualNodes: 150,
	}, cfg)
	assert.NoError(t, cfg.Validate())
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://w0:8000", "http://w1:8000"]}`))
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig("http://w0:8000", "http://w1:8000"), cfg)

	cfg, err = ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing"}}`))
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig("http://a"), cfg)

	cfg, err = ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "min_load_gap": 0}}`))
	require.NoError(t, err)
	assert.Equal(t, boundedPolicy(1.5, 0), cfg.Policy)

	cfg, err = ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "max_load_skew": 1}}`))
	require.NoError(t, err)
	assert.Equal(t, boundedPolicy(1, 2), cfg.Policy)

	cfg, err = ParseConfig([]byte(`{"worker_urls": [], "policy": null}`))
	require.NoError(t, err)
	assert.Equal(t, PolicyBoundedConsistentHashing, cfg.Policy.Kind)
	assert.Empty(t, cfg.WorkerURLs)
}

func TestParseConfigFull(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://w0:8000"], "virtual_nodes": 64,
		"policy": {"type": "bounded_consistent_hashing", "max_load_skew": 2.25, "min_load_gap": 5}}`))
	require.NoError(t, err)
	assert.Equal(t, Config{WorkerURLs: []string{"http://w0:8000"}, Policy: boundedPolicy(2.25, 5), VirtualNodes: 64}, cfg)

	for name, kind := range map[string]PolicyKind{
		"random": PolicyRandom, "round_robin": PolicyRoundRobin,
		"consistent_hashing": PolicyConsistentHashing, "bounded_consistent_hashing": PolicyBoundedConsistentHashing,
	} {
		cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {"type": "` + name + `"}}`))
		require.NoError(t, err, name)
		assert.Equal(t, kind, cfg.Policy.Kind, name)
		assert.Equal(t, name, kind.String())
	}
	assert.Equal(t, "unknown_policy", PolicyKind(9).String())

	for _, vn := range []string{"1", "65536", "150"} {
		_, err := ParseConfig([]byte(`{"worker_urls": ["http://a"], "virtual_nodes": ` + vn + `}`))
		assert.NoError(t, err, vn)
	}
}

func TestConfigRoundTrip(t *testing.T) {
	configs := []Config{
		DefaultConfig("http://w0:8000", "http://w1:8000"),
		{WorkerURLs: []string{"http://x"}, Policy: boundedPolicy(1, 0), VirtualNodes: 1},
		{WorkerURLs: []string{"http://x", "http://y"}, Policy: boundedPolicy(3.75, 1000), VirtualNodes: MaxVirtualNodes},
		{WorkerURLs: []string{"http://ünïcode", "https://a\"quote"}, Policy: boundedPolicy(1.0000001, 7), VirtualNodes: 3},
		{WorkerURLs: nil, Policy: boundedPolicy(1.5, 2), VirtualNodes: 150},
	}
	for _, cfg := range configs {
		data, err := json.Marshal(cfg)
		require.NoError(t, err)
		back, err := ParseConfig(data)
		require.NoError(t, err, string(data))
		if cfg.WorkerURLs == nil {
			cfg.WorkerURLs = []string{}
		}
		assert.Equal(t, cfg, back, string(data))
	}
	// The other policies carry no settings; the kind survives and the form is {"type": ...}.
	for _, kind := range []PolicyKind{PolicyRandom, PolicyRoundRobin, PolicyConsistentHashing} {
		cfg := Config{WorkerURLs: []string{"http://a"}, Policy: Policy{Kind: kind}, VirtualNodes: 10}
		data, err := cfg.MarshalJSON()
		require.NoError(t, err)
		back, err := ParseConfig(data)
		require.NoError(t, err, string(data))
		assert.Equal(t, kind, back.Policy.Kind)
		assert.Equal(t, cfg.WorkerURLs, back.WorkerURLs)
		assert.Equal(t, 10, back.VirtualNodes)
		p, err := json.Marshal(cfg.Policy)
		require.NoError(t, err)
		if kind == PolicyConsistentHashing {
			assert.JSONEq(t, `{"type": "consistent_hashing", "hash_ring": "xxh64"}`, string(p))
		} else {
			assert.JSONEq(t, `{"type": "`+kind.String()+`"}`, string(p))
		}
	}
	p, err := json.Marshal(boundedPolicy(1.5, 2))
	require.NoError(t, err)
	assert.JSONEq(t, `{"type": "bounded_consistent_hashing", "max_load_skew": 1.5, "min_load_gap": 2, "hash_ring": "xxh64"}`, string(p))
	back, err := ParsePolicy(p)
	require.NoError(t, err)
	assert.Equal(t, boundedPolicy(1.5, 2), back)
}

func TestParseConfigHashRing(t *testing.T) {
	for _, policy := range []string{`"type": "consistent_hashing"`, `"type": "bounded_consistent_hashing"`} {
		cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {` + policy + `}}`))
		require.NoError(t, err)
		assert.Equal(t, HashRingXXH64, cfg.Policy.HashRing, "the default")
		for name, want := range map[string]HashRing{"xxh64": HashRingXXH64, "smg": HashRingSMG} {
			cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {` + policy + `, "hash_ring": "` + name + `"}}`))
			require.NoError(t, err, name)
			assert.Equal(t, want, cfg.Policy.HashRing, name)
			data, err := json.Marshal(cfg)
			require.NoError(t, err)
			back, err := ParseConfig(data)
			require.NoError(t, err, string(data))
			assert.Equal(t, cfg, back, string(data))
		}
		for _, bad := range []string{`"SMG"`, `"blake3"`, `""`, `1`, `null`, `true`, `["smg"]`} {
			requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {`+policy+`, "hash_ring": `+bad+`}}`,
				"hash_ring", `must be "xxh64" or "smg"`, bad)
		}
	}
	for _, policy := range []string{"random", "round_robin"} {
		for _, value := range []string{`"smg"`, `"xxh64"`} {
			requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "`+policy+`", "hash_ring": `+value+`}}`,
				"hash_ring applies only to consistent_hashing, bounded_consistent_hashing and cache_aware, not "+policy)
		}
	}
	for _, policy := range []Policy{{Kind: PolicyRandom, HashRing: HashRingSMG}, {Kind: PolicyConsistentHashing, HashRing: 2}} {
		err := policy.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), "hash_ring")
	}
}

// requireConfigError checks that ParseConfig rejects data with an ErrInvalidConfig whose
// message contains every fragment (the field name, the rule).
func requireConfigError(t *testing.T, data string, fragments ...string) {
	t.Helper()
	_, err := ParseConfig([]byte(data))
	require.Error(t, err, data)
	require.ErrorIs(t, err, ErrInvalidConfig, data)
	for _, f := range fragments {
		require.Contains(t, err.Error(), f, data)
	}
}

func bounded(settings string) string {
	return `{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", ` + settings + `}}`
}

func TestParseConfigRejectsBadMaxLoadSkew(t *testing.T) {
	for _, v := range []string{"0.5", "-1", "0", "0.999999", "true", `"1.5"`, "1e999", "-1e999", "[]", "{}"} {
		requireConfigError(t, bounded(`"max_load_skew": `+v), "max_load_skew", "finite number >= 1.0")
	}
}

func TestParseConfigRejectsBadMinLoadGap(t *testing.T) {
	for _, v := range []string{"-1", "1.5", "2.0", "true", `"2"`, "1e3", "1E3", "2e0", "99999999999999999999", "[]"} {
		requireConfigError(t, bounded(`"min_load_gap": `+v), "min_load_gap", ">= 0")
	}
}

func TestParseConfigRejectsBadVirtualNodes(t *testing.T) {
	for _, v := range []string{"0", "-1", "65537", "1.5", "true", `"150"`, "1e2", "150.0", "99999999999999999999"} {
		requireConfigError(t, `{"worker_urls": ["http://a"], "virtual_nodes": `+v+`}`, "virtual_nodes", "from 1 to 65536")
	}
}

func TestParseConfigRejectsBadPolicy(t *testing.T) {
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "least_loaded"}}`, "policy type", "least_loaded")
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "Random"}}`, "policy type")
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {}}`, "policy type")
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": "random"}`, "policy")
	for _, kind := range []string{"random", "round_robin", "consistent_hashing"} {
		requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "`+kind+`", "max_load_skew": 1.5}}`, "max_load_skew", kind)
		requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "`+kind+`", "min_load_gap": 2}}`, "min_load_gap", kind)
	}
}

func TestParseConfigRejectsUnknownFieldsAndMalformedJSON(t *testing.T) {
	requireConfigError(t, `{"worker_urls": ["http://a"], "workers": ["b"]}`, "workers")
	requireConfigError(t, bounded(`"max_load_skw": 1.5`), "max_load_skw")
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "random", "extra": 1}}`, "extra")
	requireConfigError(t, `{"worker_urls": "a"}`)
	requireConfigError(t, `{"worker_urls": [1]}`)
	requireConfigError(t, ``)
	requireConfigError(t, `{`)
	requireConfigError(t, `[]`)
	requireConfigError(t, `{"worker_urls": ["http://a"]} {}`)
	requireConfigError(t, `{"worker_urls": ["http://a"]} x`)
}

func TestParseConfigRejectsBadURLs(t *testing.T) {
	_, err := ParseConfig([]byte(`{"worker_urls": ["http://a", "http://b", "http://a"]}`))
	require.ErrorIs(t, err, ErrDuplicateWorker)
	assert.Contains(t, err.Error(), `"http://a"`)
	assert.False(t, errors.Is(err, ErrUnknownWorker))

	requireConfigError(t, `{"worker_urls": ["http://a", ""]}`, "worker URL", "empty")
}

func TestValidateDirectly(t *testing.T) {
	valid := DefaultConfig("http://a")
	for _, skew := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0.5, -1, 0, math.Nextafter(1, 0)} {
		cfg := valid
		cfg.Policy.MaxLoadSkew = skew
		err := cfg.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig, "%v", skew)
		assert.Contains(t, err.Error(), "max_load_skew")
		assert.Contains(t, err.Error(), ">= 1.0")
	}
	for _, skew := range []float64{1, 1.5, math.MaxFloat64} {
		cfg := valid
		cfg.Policy.MaxLoadSkew = skew
		assert.NoError(t, cfg.Validate(), "%v", skew)
	}

	cfg := valid
	cfg.Policy.MinLoadGap = -1
	err := cfg.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "min_load_gap")

	for _, vn := range []int{0, -1, MaxVirtualNodes + 1} {
		cfg := valid
		cfg.VirtualNodes = vn
		err := cfg.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), "virtual_nodes")
	}

	cfg = valid
	cfg.Policy.Kind = PolicyKind(len(PolicyNames()))
	err = cfg.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "policy")

	// Skew and gap are ignored by the other policies.
	for _, kind := range []PolicyKind{PolicyRandom, PolicyRoundRobin, PolicyConsistentHashing} {
		p := Policy{Kind: kind, MaxLoadSkew: math.NaN(), MinLoadGap: -5}
		assert.NoError(t, p.Validate(), kind.String())
	}

	cfg = valid
	cfg.WorkerURLs = []string{"http://ok", "http://bad\xff"}
	err = cfg.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "UTF-8")

	cfg.WorkerURLs = []string{"http://ok", ""}
	err = cfg.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "empty")

	cfg.WorkerURLs = []string{"http://ok", "http://x", "http://ok"}
	err = cfg.Validate()
	require.ErrorIs(t, err, ErrDuplicateWorker)
	assert.Contains(t, err.Error(), `"http://ok"`)

	cfg.WorkerURLs = []string{"http://W0:8000", "http://w0:8000/"}
	err = cfg.Validate()
	require.ErrorIs(t, err, ErrDuplicateWorker, "URLs are compared in their normal form")
	assert.Contains(t, err.Error(), `"http://W0:8000" and "http://w0:8000/" are the same worker, http://w0:8000`)
}

func TestSentinelErrorsAreDistinct(t *testing.T) {
	sentinels := []error{ErrInvalidConfig, ErrUnknownWorker, ErrDuplicateWorker}
	for i, a := range sentinels {
		for j, b := range sentinels {
			assert.Equal(t, i == j, errors.Is(a, b))
		}
	}
}
func TestParseConfigRejectsTrailingClosers(t *testing.T) {
	// A stray closing bracket after the object is not valid JSON either.
	requireConfigError(t, `{"worker_urls": ["http://a"]}}`)
	requireConfigError(t, `{"worker_urls": ["http://a"]}]`)
	_, err := ParsePolicy([]byte(`{"type": "random"}}`))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	// Trailing whitespace is fine.
	_, err = ParseConfig([]byte("{\"worker_urls\": [\"http://a\"]}\n \t"))
	assert.NoError(t, err)
}
func TestParseConfigRejectsNullSettings(t *testing.T) {
	// null is not a number: it must be an error, not a silent 0 (or a silent default).
	requireConfigError(t, bounded(`"min_load_gap": null`), "min_load_gap")
	requireConfigError(t, bounded(`"max_load_skew": null`), "max_load_skew")
	requireConfigError(t, `{"worker_urls": ["http://a"], "virtual_nodes": null}`, "virtual_nodes", "null")
}

func TestParseConfigRejectsNonUTF8(t *testing.T) {
	// encoding/json would silently replace the bad byte with U+FFFD, changing the worker's
	// identity; a URL that is not UTF-8 is an error everywhere else (AddWorker, Validate).
	requireConfigError(t, "{\"worker_urls\": [\"http://w0:8000\xff\"]}", "UTF-8")
	requireConfigError(t, "{\"worker_urls\": [\"http://a\"], \"policy\": {\"type\": \"random\xc3\"}}", "UTF-8")
	_, err := ParseConfig([]byte(`{"worker_urls": ["http://wö:8000"]}`))
	assert.NoError(t, err, "valid UTF-8 is fine")
}

func TestParsePolicyLeavesUnusedSettingsZero(t *testing.T) {
	for _, name := range []string{"random", "round_robin", "consistent_hashing"} {
		p, err := ParsePolicy([]byte(`{"type": "` + name + `"}`))
		require.NoError(t, err)
		assert.Equal(t, name, p.Kind.String())
		assert.Zero(t, p.MaxLoadSkew, name)
		assert.Zero(t, p.MinLoadGap, name)
	}
}

func TestParseWorkerURLs(t *testing.T) {
	urls, err := ParseWorkerURLs([]byte(`["http://a", "http://b"]`))
	require.NoError(t, err)
	assert.Equal(t, []string{"http://a", "http://b"}, urls)
	for _, bad := range []string{`["http://a\xff"]`, `"http://a"`, `[1]`, `["a"]]`} {
		_, err := ParseWorkerURLs([]byte(bad))
		assert.ErrorIs(t, err, ErrInvalidConfig, bad)
		assert.ErrorContains(t, err, "worker URLs", bad)
	}
}

func TestRingSizeIsBounded(t *testing.T) {
	many := make([]string, MaxRingEntries/MaxVirtualNodes+1)
	for i := range many {
		many[i] = "http://w" + strconv.Itoa(i)
	}
	_, err := NewRouter(Config{WorkerURLs: many, Policy: boundedPolicy(1.5, 2), VirtualNodes: MaxVirtualNodes})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "virtual_nodes")
	assert.Contains(t, err.Error(), strconv.Itoa(MaxRingEntries))

	r, err := NewRouter(Config{WorkerURLs: many[:len(many)-1], Policy: boundedPolicy(1.5, 2), VirtualNodes: MaxVirtualNodes})
	require.NoError(t, err)
	require.ErrorIs(t, r.AddWorker(many[len(many)-1]), ErrInvalidConfig)
	require.ErrorIs(t, r.SetWorkers(many), ErrInvalidConfig)
	assert.Len(t, r.Workers(), len(many)-1)
}

func TestJSONIsReadExactly(t *testing.T) {
	for _, bad := range []string{
		`{"WORKER_URLS": []}`,
		`{"worker_urls": [], "policy": {"type": "bounded_consistent_hashing", "Max_Load_Skew": 2}}`,
		`{"worker_urls": ["http://\ud800"]}`,
		`{"worker_urls": ["http://\udc00\ud800"]}`,
	} {
		_, err := ParseConfig([]byte(bad))
		assert.ErrorIs(t, err, ErrInvalidConfig, bad)
	}
	_, err := ParseWorkerURLs([]byte("null"))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://\ud83d\ude00", "http://a/\\ud800", "http://a/\"\\"]}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"http://\U0001F600", `http://a/\ud800`, `http://a/"\`}, cfg.WorkerURLs)
}

func TestParseSpillTarget(t *testing.T) {
	cfg, err := ParseConfig([]byte(bounded(`"spill_target": "least_loaded"`)))
	require.NoError(t, err)
	assert.Equal(t, SpillLeastLoaded, cfg.Policy.SpillTarget)
	cfg, err = ParseConfig([]byte(bounded(`"spill_target": "clockwise"`)))
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig("http://a"), cfg)

	for _, bad := range []string{`"Least_Loaded"`, `"random"`, `""`, `1`, `null`, `true`, `["clockwise"]`} {
		requireConfigError(t, bounded(`"spill_target": `+bad), "spill_target must be one of clockwise, least_loaded, got "+bad)
	}
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "consistent_hashing", "spill_target": "clockwise"}}`,
		"spill_target and key_memory apply only to bounded_consistent_hashing, not consistent_hashing")

	p := leastLoadedPolicy(1.5, 2)
	data, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, `{"type": "bounded_consistent_hashing", "max_load_skew": 1.5, "min_load_gap": 2, "hash_ring": "xxh64", "spill_target": "least_loaded"}`, string(data))
	back, err := ParsePolicy(data)
	require.NoError(t, err)
	assert.Equal(t, p, back)

	p.SpillTarget = 2
	assert.ErrorContains(t, p.Validate(), "spill_target must be one of clockwise, least_loaded, got 2")
}

func TestParseKeyMemory(t *testing.T) {
	for _, n := range []int{0, 1, 100_000, MaxKeyMemory} {
		cfg, err := ParseConfig([]byte(bounded(`"key_memory": ` + strconv.Itoa(n))))
		require.NoError(t, err, n)
		assert.Equal(t, n, cfg.Policy.KeyMemory)
	}
	for _, bad := range []string{`-1`, `4194305`, `1.5`, `1e3`, `"10"`, `null`, `true`, `99999999999999999999`} {
		requireConfigError(t, bounded(`"key_memory": `+bad), "key_memory must be an integer from 0 to 4194304, got "+bad)
	}
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "random", "key_memory": 0}}`,
		"spill_target and key_memory apply only to bounded_consistent_hashing, not random")
	requireConfigError(t, bounded(`"Key_Memory": 5`), "case-sensitive")
	requireConfigError(t, bounded(`"Spill_Target": "clockwise"`), "case-sensitive")

	p := boundedPolicy(1.5, 2)
	p.KeyMemory, p.SpillTarget = 4096, SpillLeastLoaded
	data, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, `{"type": "bounded_consistent_hashing", "max_load_skew": 1.5, "min_load_gap": 2, "hash_ring": "xxh64", "spill_target": "least_loaded", "key_memory": 4096}`, string(data))
	back, err := ParsePolicy(data)
	require.NoError(t, err)
	assert.Equal(t, p, back)

	p.KeyMemory = -1
	assert.ErrorContains(t, p.Validate(), "key_memory must be an integer from 0 to 4194304, got -1")
}

func TestParseNewPolicies(t *testing.T) {
	for _, c := range []struct {
		json string
		want Policy
	}{
		{`{"type": "power_of_two"}`, Policy{Kind: PolicyPowerOfTwo}},
		{`{"type": "least_load"}`, Policy{Kind: PolicyLeastLoad}},
		{`{"type": "manual"}`, Policy{Kind: PolicyManual, AssignmentMode: AssignRandom, MaxKeys: DefaultMaxKeys}},
		{`{"type": "manual", "assignment_mode": "min_load", "max_keys": 7}`, Policy{Kind: PolicyManual, AssignmentMode: AssignMinLoad, MaxKeys: 7}},
	} {
		p, err := ParsePolicy([]byte(c.json))
		require.NoError(t, err, c.json)
		assert.Equal(t, c.want, p, c.json)
		out, err := p.MarshalJSON()
		require.NoError(t, err)
		again, err := ParsePolicy(out)
		require.NoError(t, err)
		assert.Equal(t, p, again, string(out))
	}
}

func TestParseRefusesSMGOnlyNamesSayingSo(t *testing.T) {
	for _, name := range []string{"bucket", "prefix_hash", "passthrough"} {
		_, err := ParsePolicy([]byte(`{"type": "` + name + `"}`))
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), `policy type "`+name+`" exists in SMG but is not implemented by bounded-router`)
	}
	_, err := ParsePolicy([]byte(`{"type": "nonsense"}`))
	assert.ErrorContains(t, err, "policy type must be one of random, round_robin, consistent_hashing, bounded_consistent_hashing, power_of_two, least_load, manual, cache_aware")
	for _, mode := range []string{"min_group", "delegate"} {
		_, err := ParsePolicy([]byte(`{"type": "manual", "assignment_mode": "` + mode + `"}`))
		assert.ErrorContains(t, err, `assignment_mode "`+mode+`" exists in SMG but is not implemented by bounded-router`)
	}
}

func TestParseManualSettingsErrors(t *testing.T) {
	cases := map[string]string{
		`{"type": "manual", "assignment_mode": "fastest"}`:      "assignment_mode must be one of random, min_load",
		`{"type": "manual", "assignment_mode": 1}`:              "assignment_mode must be one of",
		`{"type": "manual", "max_keys": 0}`:                     "max_keys must be an integer from 1 to",
		`{"type": "manual", "max_keys": 1.5}`:                   "max_keys must be an integer",
		`{"type": "least_load", "max_keys": 4}`:                 "apply only to manual, not least_load",
		`{"type": "power_of_two", "assignment_mode": "random"}`: "apply only to manual, not power_of_two",
		`{"type": "manual", "hash_ring": "smg"}`:                "hash_ring applies only to",
		`{"type": "manual", "key_memory": 3}`:                   "apply only to bounded_consistent_hashing, not manual",
	}
	for in, want := range cases {
		_, err := ParsePolicy([]byte(in))
		require.ErrorIs(t, err, ErrInvalidConfig, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

func TestParseConfigCacheAware(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {"type": "cache_aware"}}`))
	require.NoError(t, err)
	assert.Equal(t, Policy{Kind: PolicyCacheAware, MaxLoadSkew: DefaultMaxLoadSkew, MinLoadGap: DefaultMinLoadGap, CacheAware: CacheAwareSettings{BlocksPerWorker: DefaultBlocksPerWorker, CacheThreshold: DefaultCacheThreshold}}, cfg.Policy)

	cfg, err = ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "max_load_skew": 1.25,
		"min_load_gap": 64, "blocks_per_worker": 100, "hash_ring": "smg", "cache_threshold": 0}}`))
	require.NoError(t, err)
	want := Policy{Kind: PolicyCacheAware, MaxLoadSkew: 1.25, MinLoadGap: 64, CacheAware: CacheAwareSettings{BlocksPerWorker: 100}, HashRing: HashRingSMG}
	assert.Equal(t, want, cfg.Policy)
	// What MarshalJSON writes, ParsePolicy reads back.
	text, err := json.Marshal(cfg.Policy)
	require.NoError(t, err)
	back, err := ParsePolicy(text)
	require.NoError(t, err)
	assert.Equal(t, want, back)

	for _, bad := range []string{`0`, `-1`, `1048577`, `1.5`, `1e3`, `"8"`, `null`, `true`} {
		requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "blocks_per_worker": `+bad+`}}`,
			"blocks_per_worker must be an integer from 1 to 1048576", bad)
	}
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "max_load_skew": 0.5}}`, "max_load_skew")
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "min_load_gap": -1}}`, "min_load_gap")
	for _, field := range []string{`"spill_target": "least_loaded"`, `"key_memory": 4`} {
		requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", `+field+`}}`,
			"apply only to bounded_consistent_hashing, not cache_aware")
	}
	for _, bad := range []string{`-0.1`, `1.01`, `"0.5"`, `null`, `true`} {
		requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "cache_threshold": `+bad+`}}`,
			"cache_threshold must be a number from 0.0 to 1.0", bad)
	}
	for _, policy := range []string{"random", "round_robin", "consistent_hashing", "bounded_consistent_hashing"} {
		for _, field := range []string{`"blocks_per_worker": 8`, `"cache_threshold": 0.5`, `"hit_wait_factor": 6`} {
			requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "`+policy+`", `+field+`}}`,
				"blocks_per_worker, cache_threshold and hit_wait_factor apply only to cache_aware, not "+policy)
		}
	}
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "Blocks_Per_Worker": 8}}`, "case-sensitive")

	// hit_wait_factor (contract: Prefill load, rule 5) needs balance_by prefill and a finite number >= 0.
	cfg, err = ParseConfig([]byte(`{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "balance_by": "prefill", "hit_wait_factor": 6}}`))
	require.NoError(t, err)
	assert.Equal(t, 6.0, cfg.Policy.CacheAware.HitWaitFactor)
	text, err = json.Marshal(cfg.Policy)
	require.NoError(t, err)
	assert.Contains(t, string(text), `"hit_wait_factor":6`)
	back, err = ParsePolicy(text)
	require.NoError(t, err)
	assert.Equal(t, cfg.Policy, back)
	for _, bad := range []string{`-1`, `"6"`, `null`, `true`, `1e400`} {
		requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "balance_by": "prefill", "hit_wait_factor": `+bad+`}}`,
			"hit_wait_factor must be a finite number >= 0", bad)
	}
	requireConfigError(t, `{"worker_urls": ["http://a"], "policy": {"type": "cache_aware", "hit_wait_factor": 6}}`,
		"hit_wait_factor applies only with balance_by prefill, got balance_by in_flight")
	text, err = json.Marshal(cachePolicy(1.5, 2, 8))
	require.NoError(t, err)
	assert.NotContains(t, string(text), "hit_wait_factor", "the default is written as before the setting existed")

	p := cachePolicy(1.5, 2, 0)
	require.ErrorContains(t, p.Validate(), "blocks_per_worker")
	p.CacheAware.BlocksPerWorker = MaxBlocksPerWorker + 1
	require.ErrorContains(t, p.Validate(), "blocks_per_worker")
}
