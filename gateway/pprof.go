package gateway

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// pprofPath is where Options.Pprof serves Go's profiles on the admin listener.
const pprofPath = "/debug/pprof/"

// servePprof answers one request below pprofPath as net/http/pprof does: the index, the CPU
// profile (?seconds=N), the execution trace, or a named profile (heap, allocs, goroutine, ...).
// With --control-plane-api-keys it asks for a key, as the worker API does. The command line is
// not served: it carries those keys.
func (c *controlPlane) servePprof(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(r) {
		c.refuse(w, r, "the profiles need")
		return
	}
	switch name := strings.TrimPrefix(r.URL.Path, pprofPath); name {
	case "profile":
		pprof.Profile(w, r)
	case "trace":
		pprof.Trace(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "cmdline":
		http.NotFound(w, r)
	default:
		pprof.Index(w, r) // the index at "", a named profile otherwise
	}
}
