package loadpoll

import (
	"errors"
	"testing"

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
	assert.Equal(t, int64(9), load)
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
	assert.Equal(t, int64(7), load, "4 + 1 running, 2 waiting; other metrics ignored")
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
		{FormatSGLang, `[{"num_reqs": -1}]`, "a load of -1"},
		{FormatSGLang, `[{"num_reqs": 1e300}]`, "a load of"},
		{FormatVLLM, "up 1\n", "no vllm:num_requests_running"},
		{FormatVLLM, "vllm:num_requests_running{a=\"b\" 1\n", "unclosed labels"},
		{FormatVLLM, "vllm:num_requests_running x\n", `the value "x"`},
		{FormatVLLM, "vllm:num_requests_running NaN\n", "a load of NaN"},
	} {
		_, err := ParseLoad(c.format, []byte(c.body))
		require.Error(t, err, c.body)
		assert.True(t, errors.Is(err, ErrGarbage), "%s: %v", c.body, err)
		assert.ErrorContains(t, err, c.text)
	}
	_, err := ParseLoad("triton", nil)
	assert.EqualError(t, err, `load format must be one of sglang, vllm, got "triton"`)
}
