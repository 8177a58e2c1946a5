package gateway

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	"github.com/bounded-router/bounded-router/core"
)

// metricsContentType is the Prometheus text format the exposition is written in.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// The metric families, with the names, types and help texts of the Python package's
// bounded_router.metrics, so dashboards read the gateway and the Python proxies alike.
var metricFamilies = [...]struct{ name, kind, help string }{
	{"bounded_router_requests_total", "counter", "Requests routed, by the branch that chose the worker (or found none)."},
	{"bounded_router_worker_load", "gauge", "Leases held on the worker: requests in flight from this process."},
	{"bounded_router_worker_active_keys", "gauge", "Distinct explicit routing keys among the leases held on the worker."},
	{"bounded_router_worker_healthy", "gauge", "1 if the worker is available for routing, 0 if it is marked unhealthy."},
	{"bounded_router_worker_indexed_blocks", "gauge", "Prefix blocks cache_aware remembers sending to the worker."},
	{"bounded_router_active_leases", "gauge", "Leases held, including those on workers removed since they were taken."},
	{"bounded_router_leaked_leases_total", "counter", "Leases garbage-collected without release (released by the safety net): each one is a bug."},
	{"bounded_router_prefix_blocks_total", "counter", "Prefix blocks of the requests cache_aware routed."},
	{"bounded_router_prefix_blocks_matched_total", "counter", "Prefix blocks of the requests cache_aware routed that their worker held (the matched prefix)."},
	{"bounded_router_indexed_blocks", "gauge", "(worker, block) pairs in cache_aware's index, over all workers."},
	{"bounded_router_worker_routed_total", "counter", "Leases taken on the worker: requests routed (or acquired) to it."},
	{"bounded_router_worker_outcomes_total", "counter", "Released requests of the worker by outcome: success, failure, pushback (429), neutral."},
	{"bounded_router_worker_condition", "gauge", "1 for the worker's condition: available, half_open, ejected, unhealthy_probe or unhealthy_user."},
	{"bounded_router_worker_ejections_total", "counter", "Times the worker's circuit breaker opened."},
	{"bounded_router_worker_probes_total", "counter", "Health-check probes of the worker, by result: passed or failed."},
	{"bounded_router_worker_prefill_load", "gauge", "Weight of the leases held on the worker that have not seen their first token: its prefill queue."},
	{"bounded_router_worker_prefill_requests", "gauge", "Leases held on the worker that have not seen their first token."},
}

// gatewayFamilies are the gateway's own families, after the router's.
var gatewayFamilies = [...]struct{ name, kind, help string }{
	{"bounded_router_retries_total", "counter", "Requests sent again to another worker after a failure before the first byte, by reason."},
}

// renderMetrics writes the router's statistics as bounded_router.metrics.render does, then
// the gateway's own.
func renderMetrics(g *Gateway) []byte {
	snap := g.router.Snapshot()
	stats, workers := snap.Stats, snap.Workers
	var b bytes.Buffer
	for i, f := range metricFamilies {
		header(&b, f.name, f.kind, f.help)
		switch i {
		case 0:
			for branch, n := range stats.Branches {
				sample(&b, f.name, "branch", core.Branch(branch).String(), int64(n))
			}
		case 1, 2, 3, 4, 15, 16:
			for _, w := range workers {
				sample(&b, f.name, "worker", w.URL, workerMetric(i, w))
			}
		case 5:
			sample(&b, f.name, "", "", int64(stats.ActiveLeases))
		case 6:
			sample(&b, f.name, "", "", int64(stats.Leaked))
		case 7:
			sample(&b, f.name, "", "", int64(stats.PrefixBlocks))
		case 8:
			sample(&b, f.name, "", "", int64(stats.PrefixBlocksMatched))
		case 9:
			sample(&b, f.name, "", "", int64(stats.IndexedBlocks))
		default:
			workerFailureMetrics(&b, f.name, i, workers)
		}
	}
	for _, f := range gatewayFamilies {
		header(&b, f.name, f.kind, f.help)
		for reason, name := range retryReasonNames {
			sample(&b, f.name, "reason", name, int64(g.retries[reason].Load()))
		}
	}
	return b.Bytes()
}

func header(b *bytes.Buffer, name, kind, help string) {
	b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + kind + "\n")
}

// workerFailureMetrics writes the per-worker families of contract "Worker failures" (10 to 14).
func workerFailureMetrics(b *bytes.Buffer, name string, i int, workers []core.WorkerState) {
	for _, w := range workers {
		worker := `worker="` + labelEscaper.Replace(w.URL) + `"`
		switch i {
		case 10:
			labelled(b, name, worker, int64(w.Routed))
		case 11:
			for o, n := range w.Outcomes {
				labelled(b, name, worker+`,outcome="`+core.Outcome(o).String()+`"`, int64(n))
			}
		case 12:
			for c := core.WorkerCondition(0); c < core.NumConditions; c++ {
				labelled(b, name, worker+`,condition="`+c.String()+`"`, boolMetric(w.Condition == c))
			}
		case 13:
			labelled(b, name, worker, int64(w.Ejections))
		case 14:
			labelled(b, name, worker+`,result="passed"`, int64(w.Probes.Passed))
			labelled(b, name, worker+`,result="failed"`, int64(w.Probes.Failed))
		}
	}
}

func boolMetric(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

func labelled(b *bytes.Buffer, name, labels string, n int64) {
	b.WriteString(name + "{" + labels + "} " + strconv.FormatInt(n, 10) + "\n")
}

// workerMetric is the value of per-worker family i (1 to 4, 15 and 16) for w.
func workerMetric(i int, w core.WorkerState) int64 {
	switch i {
	case 1:
		return w.Load
	case 2:
		return int64(w.ActiveKeys)
	case 3:
		return boolMetric(w.Healthy)
	case 15:
		return w.PrefillLoad
	case 16:
		return w.PrefillRequests
	}
	return int64(w.IndexedBlocks)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

func sample(b *bytes.Buffer, name, label, value string, n int64) {
	b.WriteString(name)
	if label != "" {
		b.WriteString("{" + label + `="` + labelEscaper.Replace(value) + `"}`)
	}
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(n, 10))
	b.WriteByte('\n')
}

// adminHandler serves the admin listener: GET /metrics, the probes and the worker API; 404 elsewhere.
func (g *Gateway) adminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case g.control.probe(w, req):
		case isAPIPath(req.URL.Path):
			g.control.serveAPI(w, req)
		case g.opts.Pprof && strings.HasPrefix(req.URL.Path, pprofPath):
			g.control.servePprof(w, req)
		case req.URL.Path != "/metrics":
			http.NotFound(w, req)
		case allowRead(w, req):
			w.Header().Set("Content-Type", metricsContentType)
			w.Write(renderMetrics(g))
		}
	})
}
