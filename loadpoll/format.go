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

	"github.com/bounded-router/bounded-router/core"
)

// Format names the shape of a load endpoint's answer.
type Format string

const (
	// FormatSGLang is SGLang's GET /get_load: a JSON array with one object per data-parallel
	// rank, each with num_reqs (its requests running and waiting) and num_waiting_reqs (those
	// waiting); the report's figures are their sums (without a waiting figure when a rank has no
	// num_waiting_reqs, as older versions).
	FormatSGLang Format = "sglang"
	// FormatSGLangLoads is SGLang's GET /v1/loads: {"loads": [one object per data-parallel
	// rank]}, each with num_running_reqs and num_waiting_reqs, and in recent versions
	// num_waiting_uncached_tokens (the prompt tokens of its prefill queue its cache does not hold):
	// the report's requests, requests waiting and waiting tokens are their sums.
	FormatSGLangLoads Format = "sglang_loads"
	// FormatVLLM is vLLM's GET /metrics, Prometheus text: the requests are the sum of every
	// sample of vllm:num_requests_running and vllm:num_requests_waiting (one per engine or model
	// label), the requests waiting the sum of those of vllm:num_requests_waiting.
	FormatVLLM Format = "vllm"
)

// ErrGarbage is wrapped by every error of an answer that is not of its format.
var ErrGarbage = errors.New("not a load report")

// Formats are the formats ParseLoad reads.
var Formats = []Format{FormatSGLang, FormatSGLangLoads, FormatVLLM}

// ParseLoad reads the engine's report from an answer of the given format. Its Waiting, when
// set, is in prompt tokens (FormatSGLangLoads alone gives it); the poller passes it on only to a
// router whose leases weigh prompt tokens (Config.TokenWeights).
func ParseLoad(format Format, body []byte) (core.EngineLoad, error) {
	switch format {
	case FormatSGLang:
		return parseSGLang(body)
	case FormatSGLangLoads:
		return parseSGLangLoads(body)
	case FormatVLLM:
		return parseVLLM(body)
	}
	return core.EngineLoad{}, errUnknownFormat(format)
}

func errUnknownFormat(format Format) error {
	return fmt.Errorf("load format must be one of sglang, sglang_loads, vllm, got %q", format)
}

func parseSGLang(body []byte) (core.EngineLoad, error) {
	var ranks []struct {
		NumReqs        *float64 `json:"num_reqs"`
		NumWaitingReqs *float64 `json:"num_waiting_reqs"`
	}
	if err := json.Unmarshal(body, &ranks); err != nil {
		return core.EngineLoad{}, fmt.Errorf("%w: /get_load is not a JSON array of objects: %v", ErrGarbage, err)
	}
	if len(ranks) == 0 {
		return core.EngineLoad{}, fmt.Errorf("%w: /get_load has no rank", ErrGarbage)
	}
	var requests, waiting float64
	counted := true
	for i, rank := range ranks {
		if rank.NumReqs == nil {
			return core.EngineLoad{}, fmt.Errorf("%w: /get_load rank %d has no num_reqs", ErrGarbage, i)
		}
		if err := checkCount("num_reqs", i, *rank.NumReqs); err != nil {
			return core.EngineLoad{}, err
		}
		requests += *rank.NumReqs
		if counted = counted && rank.NumWaitingReqs != nil; counted {
			if err := checkCount("num_waiting_reqs", i, *rank.NumWaitingReqs); err != nil {
				return core.EngineLoad{}, err
			}
			if *rank.NumWaitingReqs > *rank.NumReqs {
				return core.EngineLoad{}, fmt.Errorf("%w: rank %d: a load of %v requests, %v of them waiting", ErrGarbage, i, *rank.NumReqs, *rank.NumWaitingReqs)
			}
			waiting += *rank.NumWaitingReqs
		}
	}
	load, err := checkedLoad(requests, waiting)
	if !counted {
		load.WaitingRequests = core.Unreported
	}
	return load, err
}

func parseSGLangLoads(body []byte) (core.EngineLoad, error) {
	var answer struct {
		Loads []struct {
			Running  *float64 `json:"num_running_reqs"`
			Waiting  *float64 `json:"num_waiting_reqs"`
			Uncached *float64 `json:"num_waiting_uncached_tokens"`
		} `json:"loads"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return core.EngineLoad{}, fmt.Errorf("%w: /v1/loads is not a JSON object of loads: %v", ErrGarbage, err)
	}
	if len(answer.Loads) == 0 {
		return core.EngineLoad{}, fmt.Errorf("%w: /v1/loads has no rank", ErrGarbage)
	}
	var running, waiting, tokens float64
	counted := true
	for i, rank := range answer.Loads {
		if rank.Running == nil || rank.Waiting == nil {
			return core.EngineLoad{}, fmt.Errorf("%w: /v1/loads rank %d lacks num_running_reqs or num_waiting_reqs", ErrGarbage, i)
		}
		if err := errors.Join(checkCount("num_running_reqs", i, *rank.Running), checkCount("num_waiting_reqs", i, *rank.Waiting)); err != nil {
			return core.EngineLoad{}, err
		}
		running, waiting = running+*rank.Running, waiting+*rank.Waiting
		if counted = counted && rank.Uncached != nil; counted {
			if err := checkCount("num_waiting_uncached_tokens", i, *rank.Uncached); err != nil {
				return core.EngineLoad{}, err
			}
			tokens += *rank.Uncached
		}
	}
	load, err := checkedLoad(running+waiting, waiting)
	if err != nil || !counted {
		return load, err
	}
	if !isCount(tokens) {
		return core.EngineLoad{}, fmt.Errorf("%w: %v waiting uncached tokens", ErrGarbage, tokens)
	}
	load.Waiting = int64(math.Round(tokens))
	return load, nil
}

// parseVLLM sums the samples of vLLM's two gauges of requests in Prometheus text exposition.
func parseVLLM(body []byte) (core.EngineLoad, error) {
	const running, waiting = "vllm:num_requests_running", "vllm:num_requests_waiting"
	var sums [2]float64
	var found [2]bool
	lines := bufio.NewScanner(bytes.NewReader(body))
	lines.Buffer(make([]byte, 0, 4096), len(body)+1)
	for lines.Scan() {
		line := lines.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		for i, name := range [2]string{running, waiting} {
			value, ok, err := sample(line, name)
			if err == nil && ok && !isCount(value) {
				err = fmt.Errorf("%w: %s is %v, not a count from 0 to %d", ErrGarbage, name, value, int64(core.MaxEngineLoad))
			}
			if err != nil {
				return core.EngineLoad{}, err
			}
			if ok {
				sums[i], found[i] = sums[i]+value, true
			}
		}
	}
	if !found[0] || !found[1] {
		return core.EngineLoad{}, fmt.Errorf("%w: /metrics lacks %s or %s", ErrGarbage, running, waiting)
	}
	return checkedLoad(sums[0]+sums[1], sums[1])
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

// isCount tells whether a figure can be a count of requests or tokens.
func isCount(v float64) bool { return !math.IsNaN(v) && v >= 0 && v <= core.MaxEngineLoad }

// checkCount refuses a figure of a rank that is no count of requests or tokens.
func checkCount(name string, rank int, v float64) error {
	if !isCount(v) {
		return fmt.Errorf("%w: %s of rank %d is %v, not a count from 0 to %d", ErrGarbage, name, rank, v, int64(core.MaxEngineLoad))
	}
	return nil
}

// checkedLoad is the report of requests running and waiting and of requests waiting.
func checkedLoad(requests, waiting float64) (core.EngineLoad, error) {
	for _, n := range [2]float64{requests, waiting} {
		if !isCount(n) || waiting > requests {
			return core.EngineLoad{}, fmt.Errorf("%w: a load of %v requests, %v of them waiting", ErrGarbage, requests, waiting)
		}
	}
	return core.EngineLoad{Requests: int64(math.Round(requests)), Waiting: core.Unreported, WaitingRequests: int64(math.Round(waiting))}, nil
}
