// Package loadpoll polls each worker's load endpoint and reports the engine's load to the
// router (docs/contract.md, "Engine load reports"): SGLang's GET /get_load and vLLM's GET
// /metrics. This file reads the two answers; poller.go schedules the polls.
package loadpoll

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Format names the shape of a load endpoint's answer.
type Format string

const (
	// FormatSGLang is SGLang's GET /get_load: a JSON array with one object per data-parallel
	// rank, each with num_reqs (its requests running and waiting); the load is their sum.
	FormatSGLang Format = "sglang"
	// FormatVLLM is vLLM's GET /metrics, Prometheus text: the load is the sum of every sample of
	// vllm:num_requests_running and vllm:num_requests_waiting (one per engine or model label).
	FormatVLLM Format = "vllm"
)

// ErrGarbage is wrapped by every error of an answer that is not of its format.
var ErrGarbage = errors.New("not a load report")

// maxLoad is core.MaxEngineLoad: a load beyond it is garbage, not a load.
const maxLoad = 1 << 40

// ParseLoad reads the load from an answer of the given format.
func ParseLoad(format Format, body []byte) (int64, error) {
	switch format {
	case FormatSGLang:
		return parseSGLang(body)
	case FormatVLLM:
		return parseMetrics(body, "vllm:num_requests_running", "vllm:num_requests_waiting")
	}
	return 0, fmt.Errorf("load format must be one of sglang, vllm, got %q", format)
}

func parseSGLang(body []byte) (int64, error) {
	var ranks []struct {
		NumReqs *float64 `json:"num_reqs"`
	}
	if err := json.Unmarshal(body, &ranks); err != nil {
		return 0, fmt.Errorf("%w: /get_load is not a JSON array of objects: %v", ErrGarbage, err)
	}
	if len(ranks) == 0 {
		return 0, fmt.Errorf("%w: /get_load has no rank", ErrGarbage)
	}
	var total float64
	for i, rank := range ranks {
		if rank.NumReqs == nil {
			return 0, fmt.Errorf("%w: /get_load rank %d has no num_reqs", ErrGarbage, i)
		}
		total += *rank.NumReqs
	}
	return checkedLoad(total)
}

// parseMetrics sums the samples of the named metrics in Prometheus text exposition.
func parseMetrics(body []byte, names ...string) (int64, error) {
	var total float64
	found := false
	lines := bufio.NewScanner(bytes.NewReader(body))
	lines.Buffer(make([]byte, 0, 4096), len(body)+1)
	for lines.Scan() {
		line := lines.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		for _, name := range names {
			value, ok, err := sample(line, name)
			if err != nil {
				return 0, err
			}
			if ok {
				total, found = total+value, true
			}
		}
	}
	if !found {
		return 0, fmt.Errorf("%w: /metrics has no %s", ErrGarbage, names[0])
	}
	return checkedLoad(total)
}

// sample reads the value of a sample line of metric name (with or without labels).
func sample(line []byte, name string) (float64, bool, error) {
	rest, ok := bytes.CutPrefix(line, []byte(name))
	if !ok || len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ') {
		return 0, false, nil
	}
	if rest[0] == '{' {
		end := bytes.LastIndexByte(rest, '}')
		if end < 0 {
			return 0, false, fmt.Errorf("%w: %s has unclosed labels", ErrGarbage, name)
		}
		rest = rest[end+1:]
	}
	fields := bytes.Fields(rest) // the value, then an optional timestamp
	if len(fields) == 0 {
		return 0, false, fmt.Errorf("%w: %s has no value", ErrGarbage, name)
	}
	value, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %s has the value %q", ErrGarbage, name, fields[0])
	}
	return value, true, nil
}

func checkedLoad(total float64) (int64, error) {
	if math.IsNaN(total) || total < 0 || total > maxLoad {
		return 0, fmt.Errorf("%w: a load of %v requests", ErrGarbage, total)
	}
	return int64(math.Round(total)), nil
}
