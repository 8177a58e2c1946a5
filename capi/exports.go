// Command capi is the C interface of bounded-router, built with -buildmode=c-shared into
// libbounded_router.so. Its public header is capi/bounded_router.h (written by hand, checked
// against the one cgo generates). It translates between C values and the core package and
// holds no routing logic of its own.
package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"
	"strconv"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
)

func main() {}

// Lifecycle, membership, leases and reports. The routing exports are in route.go and batch.go.

//export br_abi_version
func br_abi_version() C.uint32_t { return abiVersion }

//export br_constants_json
func br_constants_json(buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	n, err := writeJSON(constants(), buf, capacity)
	if err != nil {
		return C.int64_t(fail(err))
	}
	return n
}

//export br_router_new
func br_router_new(configJSON *C.char, configLen C.size_t, outRouter *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	out, err := outArg(outRouter, 1, "out_router")
	if err != nil {
		return fail(err)
	}
	data, err := bytesArg(configJSON, configLen, "config")
	if err != nil {
		return fail(err)
	}
	cfg, err := core.ParseConfig(data)
	if err != nil {
		return fail(err)
	}
	r, err := core.NewRouter(cfg)
	if err != nil {
		return fail(err)
	}
	m := health.New(r, health.Options{})
	m.Start() // probes only when the config has a health_check
	out[0] = C.uint64_t(registerRouter(m))
	return statusOK
}

//export br_router_free
func br_router_free(router C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	if err := unregisterRouter(uint64(router)); err != nil {
		return fail(err)
	}
	return statusOK
}

//export br_add_worker
func br_add_worker(router C.uint64_t, url *C.char, urlLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, (*core.Router).AddWorker)
}

//export br_remove_worker
func br_remove_worker(router C.uint64_t, url *C.char, urlLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, (*core.Router).RemoveWorker)
}

//export br_set_workers
func br_set_workers(router C.uint64_t, urlsJSON *C.char, urlsLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withRouter(router, func(r *core.Router) error {
		data, err := bytesArg(urlsJSON, urlsLen, "urls")
		if err != nil {
			return err
		}
		urls, err := core.ParseWorkerURLs(data)
		if err != nil {
			return err
		}
		return r.SetWorkers(urls)
	})
}

//export br_set_healthy
func br_set_healthy(router C.uint64_t, url *C.char, urlLen C.size_t, healthy C.int32_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, func(r *core.Router, u string) error { return r.SetHealthy(u, healthy != 0) })
}

// withWorker runs do on the router of a handle with the URL argument of a membership export.
func withWorker(router C.uint64_t, url *C.char, urlLen C.size_t, do func(*core.Router, string) error) C.int32_t {
	return withRouter(router, func(r *core.Router) error {
		u, err := stringArg(url, urlLen, "url")
		if err != nil {
			return err
		}
		return do(r, u)
	})
}

//export br_acquire
func br_acquire(router C.uint64_t, url *C.char, urlLen C.size_t, key *C.char, keyLen C.size_t, weight C.int64_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return withRouter(router, func(r *core.Router) error {
		o, err := outArg(out, 2, "out")
		if err != nil {
			return err
		}
		u, err := stringArg(url, urlLen, "url")
		if err != nil {
			return err
		}
		k, err := bytesArg(key, keyLen, "key")
		if err != nil {
			return err
		}
		lease, w, err := r.AcquireWeighted(u, k, leaseWeight(weight))
		if err != nil {
			return err
		}
		o[0], o[1] = C.uint64_t(lease), C.uint64_t(w.ID)
		return nil
	})
}

// leaseWeight is the weight a weight argument asks for: 0 means 1, as in br_request.
func leaseWeight(weight C.int64_t) int64 {
	if weight == 0 {
		return 1
	}
	return int64(weight)
}

//export br_release
func br_release(router C.uint64_t, lease C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return release(router, lease, false)
}

//export br_release_abandoned
func br_release_abandoned(router C.uint64_t, lease C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return release(router, lease, true)
}

func release(router, lease C.uint64_t, abandoned bool) C.int32_t {
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	if r.Release(core.LeaseID(lease), abandoned) {
		return 1
	}
	return 0
}

//export br_lease_workers_json
func br_lease_workers_json(router C.uint64_t, lease C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	return report(router, buf, capacity, func(r *core.Router) (any, error) {
		w, p, ok := r.LeaseWorkers(core.LeaseID(lease))
		if !ok {
			return nil, errUnknownLease
		}
		return map[string]string{"worker_url": w, "preferred_url": p}, nil
	})
}

//export br_workers_json
func br_workers_json(router C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	return report(router, buf, capacity, func(r *core.Router) (any, error) { return r.Workers(), nil })
}

//export br_members_json
func br_members_json(router C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	return report(router, buf, capacity, func(r *core.Router) (any, error) { return membersJSON(r.Members()), nil })
}

// membersJSON is br_members_json's answer, [[id, url], ...], written without reflection: a
// binding reads it after every membership change.
func membersJSON(members []core.Member) json.RawMessage {
	text := make([]byte, 0, 64*len(members)+2)
	text = append(text, '[')
	for i, m := range members {
		if i > 0 {
			text = append(text, ',')
		}
		text = append(strconv.AppendUint(append(text, '['), uint64(m.ID), 10), ',')
		url, _ := json.Marshal(m.URL) // a string always encodes
		text = append(append(text, url...), ']')
	}
	return append(text, ']')
}

//export br_stats_json
func br_stats_json(router C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	return report(router, buf, capacity, func(r *core.Router) (any, error) {
		s := r.Snapshot()
		branches := make(map[string]uint64, core.NumBranches)
		for b, n := range s.Branches {
			branches[core.Branch(b).String()] = n
		}
		return map[string]any{
			"branches": branches, "leaked": s.Leaked, "active_leases": s.ActiveLeases,
			"prefix_blocks": s.PrefixBlocks, "prefix_blocks_matched": s.PrefixBlocksMatched,
			"indexed_blocks": s.IndexedBlocks, "policy": r.Policy(), "workers": s.Workers,
		}, nil
	})
}

// report answers a *_json export with what produce returns for the router.
func report(router C.uint64_t, buf *C.char, capacity C.size_t, produce func(*core.Router) (any, error)) C.int64_t {
	r, err := lookupRouter(uint64(router))
	var value any
	if err == nil {
		value, err = produce(r)
	}
	var n C.int64_t
	if err == nil {
		n, err = writeJSON(value, buf, capacity)
	}
	if err != nil {
		return C.int64_t(fail(err))
	}
	return n
}

// br_report_load records what a worker's engine reports (core.Router.ReportLoad); -1 marks a
// figure the report does not carry.
//
//export br_report_load
func br_report_load(router C.uint64_t, url *C.char, urlLen C.size_t, load, waiting, waitingRequests C.int64_t) (status C.int32_t) {
	defer guard(&status)
	report := core.EngineLoad{Requests: int64(load), Waiting: int64(waiting), WaitingRequests: int64(waitingRequests)}
	return withWorker(router, url, urlLen, func(r *core.Router, u string) error { return r.ReportLoad(u, report) })
}

// br_forget_keys forgets every routing key's remembered worker (core.Router.ForgetKeys) and
// returns how many keys were remembered.
//
//export br_forget_keys
func br_forget_keys(router C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	return C.int32_t(r.ForgetKeys()) // at most core.MaxKeyMemory keys
}

// br_forget_load drops a worker's standing engine load report (core.Router.ForgetLoad).
//
//export br_forget_load
func br_forget_load(router C.uint64_t, url *C.char, urlLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, func(r *core.Router, u string) error { return r.ForgetLoad(u) })
}
