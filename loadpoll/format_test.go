package loadpoll

import (
	"errors"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The answers below are written from the engines' published shapes: SGLang's scheduler answers
// /get_load with one object per data-parallel rank (num_reqs, num_waiting_reqs, num_tokens, dp_rank),
// vLLM's /metrics exposes vllm:num_requests_running and vllm:num_requests_waiting gauges with
// model_name and engine labels.

func TestParseSGLang(t *testing.T) {
	body := `[{"num_reqs": 7, "num_waiting_reqs": 3, "num_tokens": 4096, "dp_rank": 0},
	          {"num_reqs": 2, "num_waiting_reqs": 0, "num_tokens": 10, "dp_rank": 1}]`
	load, err := ParseLoad(FormatSGLang, []byte(body))
	require.NoError(t, err)
	assert.Equal(t, core.EngineLoad{Requests: 9, Waiting: core.Unreported, WaitingRequests: 3}, load)
	// A version without num_waiting_reqs still reports its requests.
	load, err = ParseLoad(FormatSGLang, []byte(`[{"num_reqs": 4, "num_tokens": 10, "dp_rank": 0}, {"num_reqs": 1, "num_waiting_reqs": 1}]`))
	require.NoError(t, err)
	assert.Equal(t, core.RequestsReport(5), load)
}

// SGLang's /v1/loads (python/sglang/srt/entrypoints/v1_loads.py: timestamp, version and one
// LoadSnapshot dict per rank under "loads"; num_waiting_uncached_tokens in recent versions).
func TestParseSGLangLoads(t *testing.T) {
	body := `{"timestamp": "2026-12-01T00:00:00+00:00", "version": "0.5.6", "accelerator": null, "num_accelerators": 1,
	  "loads": [{"dp_rank": 0, "num_running_reqs": 5, "num_waiting_reqs": 2, "num_waiting_uncached_tokens": 3000,
	             "num_used_tokens": 9000, "num_total_tokens": 12000, "max_total_num_tokens": 100000, "token_usage": 0.09},
	            {"dp_rank": 1, "num_running_reqs": 1, "num_waiting_reqs": 1, "num_waiting_uncached_tokens": 500.0}]}`
	load, err := ParseLoad(FormatSGLangLoads, []byte(body))
	require.NoError(t, err)
	assert.Equal(t, core.EngineLoad{Requests: 9, Waiting: 3500, WaitingRequests: 3}, load)
	// An older version: no waiting tokens, the requests waiting still.
	load, err = ParseLoad(FormatSGLangLoads, []byte(`{"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 1}]}`))
	require.NoError(t, err)
	assert.Equal(t, core.EngineLoad{Requests: 3, Waiting: core.Unreported, WaitingRequests: 1}, load)
}

func TestParseVLLM(t *testing.T) {
	body := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0 1700000000000
vllm:num_requests_running_total 99
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
`
	load, err := ParseLoad(FormatVLLM, []byte(body))
	require.NoError(t, err)
	assert.Equal(t, core.EngineLoad{Requests: 7, Waiting: core.Unreported, WaitingRequests: 2}, load, "4 + 1 running, 2 waiting; other metrics ignored")
}

func TestParseGarbage(t *testing.T) {
	for _, c := range []struct {
		format Format
		body   string
		text   string
	}{
		{FormatSGLang, `<html>`, "not a JSON array"},
		{FormatSGLang, `{"num_reqs": 1}`, "not a JSON array"},
		{FormatSGLang, `[]`, "no rank"},
		{FormatSGLang, `[{"dp_rank": 0}]`, "rank 0 has no num_reqs"},
		{FormatSGLang, `[{"num_reqs": -1}]`, "num_reqs of rank 0 is -1, not a count"},
		{FormatSGLang, `[{"num_reqs": 1, "num_waiting_reqs": "2"}]`, "not a JSON array"},
		{FormatSGLang, `[{"num_reqs": 1, "num_waiting_reqs": 2}]`, "a load of 1 requests, 2 of them waiting"},
		{FormatSGLang, `[{"num_reqs": 3, "num_waiting_reqs": -1}]`, "num_waiting_reqs of rank 0 is -1"},
		{FormatSGLang, `[{"num_reqs": 1e300}]`, "num_reqs of rank 0 is 1e+300"},
		// Regression (found by an audit): the figures were checked only as sums, so a negative
		// one, or a rank with more waiting than in all, hid behind the other ranks' figures.
		{FormatSGLang, `[{"num_reqs": -5, "num_waiting_reqs": 0}, {"num_reqs": 10, "num_waiting_reqs": 2}]`, "num_reqs of rank 0 is -5"},
		{FormatSGLang, `[{"num_reqs": 1, "num_waiting_reqs": 3}, {"num_reqs": 10, "num_waiting_reqs": 0}]`, "rank 0: a load of 1 requests, 3 of them waiting"},
		{FormatSGLangLoads, `{"loads": [{"num_running_reqs": -4, "num_waiting_reqs": 0}, {"num_running_reqs": 6, "num_waiting_reqs": 1}]}`, "num_running_reqs of rank 0 is -4"},
		{FormatSGLangLoads, `{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": -1}, {"num_running_reqs": 6, "num_waiting_reqs": 2}]}`, "num_waiting_reqs of rank 0 is -1"},
		{FormatSGLangLoads, `{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 0, "num_waiting_uncached_tokens": -5}, {"num_running_reqs": 1, "num_waiting_reqs": 0, "num_waiting_uncached_tokens": 9}]}`, "num_waiting_uncached_tokens of rank 0 is -5"},
		{FormatVLLM, "vllm:num_requests_running{engine=\"0\"} -3\nvllm:num_requests_running{engine=\"1\"} 8\nvllm:num_requests_waiting 1\n", "vllm:num_requests_running is -3"},
		{FormatSGLangLoads, `[{"num_reqs": 1}]`, "not a JSON object of loads"},
		{FormatSGLangLoads, `{"loads": []}`, "no rank"},
		{FormatSGLangLoads, `{"loads": [{"num_running_reqs": 1}]}`, "rank 0 lacks num_running_reqs or num_waiting_reqs"},
		{FormatSGLangLoads, `{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 0, "num_waiting_uncached_tokens": -5}]}`, "num_waiting_uncached_tokens of rank 0 is -5"},
		{FormatSGLangLoads, `{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 0, "num_waiting_uncached_tokens": "x"}]}`, "not a JSON object"},
		{FormatVLLM, "up 1\n", "lacks vllm:num_requests_running or vllm:num_requests_waiting"},
		{FormatVLLM, "vllm:num_requests_running 1\n", "lacks vllm:num_requests_running or vllm:num_requests_waiting"},
		{FormatVLLM, "vllm:num_requests_running{a=\"b\" 1\n", "unclosed labels"},
		{FormatVLLM, "vllm:num_requests_running x\n", `the value "x"`},
		{FormatVLLM, "vllm:num_requests_running NaN\nvllm:num_requests_waiting 0\n", "vllm:num_requests_running is NaN"},
	} {
		_, err := ParseLoad(c.format, []byte(c.body))
		require.Error(t, err, c.body)
		assert.True(t, errors.Is(err, ErrGarbage), "%s: %v", c.body, err)
		assert.ErrorContains(t, err, c.text)
	}
	_, err := ParseLoad("triton", nil)
	assert.EqualError(t, err, `load format must be one of sglang, sglang_loads, vllm, got "triton"`)
}

func TestParseOptions(t *testing.T) {
	targets, cfg, err := ParseOptions([]byte(`{"endpoints": {"http://w1": "http://w1/get_load", "http://w0": "http://w0/get_load"}, "format": "sglang", "interval_ms": 50}`))
	require.NoError(t, err)
	assert.Equal(t, []Target{{"http://w0", "http://w0/get_load", FormatSGLang}, {"http://w1", "http://w1/get_load", FormatSGLang}}, targets)
	assert.Equal(t, Config{Interval: 50 * time.Millisecond}, cfg)
	_, cfg, err = ParseOptions([]byte(`{"endpoints": {"http://w0": "http://w0/v1/loads"}, "format": "sglang_loads", "lease_weights": "tokens"}`))
	require.NoError(t, err)
	assert.Equal(t, Config{TokenWeights: true}, cfg)
	for body, text := range map[string]string{
		`{"endpoints": {}, "format": "vllm"}`:                                   "endpoints must name at least one worker",
		`{"endpoints": {"a": "b"}, "format": "x"}`:                              `format must be one of sglang, sglang_loads, vllm, got "x"`,
		`{"endpoints": {"a": "b"}, "format": "vllm", "interval_ms": -1}`:        "interval_ms must be from 0 to 3600000, got -1",
		`{"endpoints": {"a": "b"}, "format": "vllm", "every": 1}`:               `unknown field "every"`,
		`{"endpoints": {"a": "b"}, "format": "vllm", "lease_weights": "bytes"}`: `lease_weights must be one of requests, tokens, got "bytes"`,
		// Regression (found by an audit): the feeds' options were read more loosely than the
		// contract's "Validation" says every JSON form is.
		`{"Endpoints": {"a": "b"}, "FORMAT": "vllm"}`:          `unknown field "Endpoints" (field names are case-sensitive: "endpoints")`,
		`{"endpoints": {"a": "b\ud800"}, "format": "vllm"}`:    `\uD800 is a lone UTF-16 surrogate`,
		`{"endpoints": {"a": "b"}, "format": "vllm"} trailing`: "unexpected data after the JSON object",
	} {
		_, _, err := ParseOptions([]byte(body))
		assert.ErrorContains(t, err, text, body)
	}
}
