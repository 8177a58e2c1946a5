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
}

// renderMetrics writes the router's statistics as bounded_router.metrics.render does.
func renderMetrics(r *core.Router) []byte {
	stats, workers := r.Stats(), r.Workers()
	var b bytes.Buffer
	for i, f := range metricFamilies {
		b.WriteString("# HELP " + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.kind + "\n")
		switch i {
		case 0:
			for branch, n := range stats.Branches {
				sample(&b, f.name, "branch", core.Branch(branch).String(), int64(n))
			}
		case 1, 2, 3, 4:
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
		}
	}
	return b.Bytes()
}

// workerMetric is the value of per-worker family i (1 to 4) for w.
func workerMetric(i int, w core.WorkerState) int64 {
	switch i {
	case 1:
		return w.Load
	case 2:
		return int64(w.ActiveKeys)
	case 3:
		if w.Healthy {
			return 1
		}
		return 0
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
		case req.URL.Path != "/metrics":
			http.NotFound(w, req)
		case allowRead(w, req):
			w.Header().Set("Content-Type", metricsContentType)
			w.Write(renderMetrics(g.router))
		}
	})
}
