package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func adminGet(t *testing.T, g *Gateway, target string) (int, []byte) {
	t.Helper()
	res, err := client().Get("http://" + g.MetricsAddr() + target)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// Contract: HTTP proxies, "What clients learn" (the profiles, only on the admin listener, only when asked).
func TestPprofIsOffByDefault(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {})
	port := 0
	g := start(t, newRouter(t, w.URL), Options{MetricsPort: &port})
	if status, _ := adminGet(t, g, "/debug/pprof/heap"); status != http.StatusNotFound {
		t.Fatalf("pprof answered %d without the option", status)
	}
}

func TestPprofOnTheAdminListenerOnly(t *testing.T) {
	seen := make(chan string, 1)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { seen <- r.URL.Path })
	r := newRouter(t, w.URL)
	port := 0
	g := start(t, r, Options{MetricsPort: &port, Pprof: true})
	status, body := adminGet(t, g, "/debug/pprof/heap")
	// A profile is gzip-compressed protobuf: gzip's magic bytes 1f 8b (RFC 1952).
	if status != http.StatusOK || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		t.Fatalf("heap profile: %d %q", status, body[:min(len(body), 16)])
	}
	if status, body = adminGet(t, g, "/debug/pprof/"); status != http.StatusOK || !strings.Contains(string(body), "allocs") {
		t.Fatalf("index: %d %q", status, body)
	}
	get(t, g, "/debug/pprof/heap", nil)
	if p := <-seen; p != "/debug/pprof/heap" {
		t.Fatalf("the proxy port did not forward the path, the worker got %q", p)
	}
	waitLeases(t, r, 0)
}

func TestPprofNeedsTheAdminListener(t *testing.T) {
	err := Options{Pprof: true}.Validate()
	if err == nil || !strings.Contains(err.Error(), "pprof needs metrics_port") {
		t.Fatalf("got %v", err)
	}
}

// Regression: /debug/pprof/cmdline printed the process's command line, which carries
// --control-plane-api-keys; and with keys set the profiles were open to any caller.
func TestPprofKeepsTheKeys(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {})
	_, admin, _ := adminGateway(t, newRouter(t, w.URL), Options{Pprof: true, ControlPlaneAPIKeys: []string{"the-key"}})
	key := http.Header{"Authorization": {"Bearer the-key"}}
	if status, _, _ := call(t, "GET", admin, "/debug/pprof/cmdline", "", "", key); status != http.StatusNotFound {
		t.Fatalf("cmdline answered %d, want 404", status)
	}
	if status, _, body := call(t, "GET", admin, "/debug/pprof/heap", "", "", nil); status != http.StatusUnauthorized || !strings.Contains(body, "--control-plane-api-keys") {
		t.Fatalf("a profile without the key: %d %s", status, body)
	}
	if status, _, _ := call(t, "GET", admin, "/debug/pprof/heap", "", "", key); status != http.StatusOK {
		t.Fatalf("a profile with the key: %d", status)
	}
}
