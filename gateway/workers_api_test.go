package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/bounded-router/bounded-router/core"
)

// call sends one request to base (http://host:port) and returns the status and the body.
func call(t *testing.T, method, base, path, contentType, body string, header http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, text := do(t, req, header)
	return res.StatusCode, res.Header, text
}

func decode(t *testing.T, text string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("not a JSON object: %q", text)
	}
	return v
}

// adminGateway serves a gateway with an admin listener and captures the worker API's log.
func adminGateway(t *testing.T, r *core.Router, opts Options) (*Gateway, string, *syncBuffer) {
	t.Helper()
	port := 0
	opts.MetricsPort = &port
	g := start(t, r, opts)
	logs := &syncBuffer{}
	g.control.log = slog.New(slog.NewTextHandler(logs, nil))
	return g, "http://" + g.MetricsAddr(), logs
}

// A free loopback port nothing listens on stands for a worker that is never reached.
const unreachable = "http://127.0.0.1:9"

func register(t *testing.T, admin, url string) string {
	t.Helper()
	status, _, body := call(t, "POST", admin, "/workers", "application/json", `{"url":"`+url+`","worker_type":"regular","bootstrap_port":null}`, nil)
	if status != http.StatusAccepted {
		t.Fatalf("POST /workers %s: %d %s", url, status, body)
	}
	v := decode(t, body)
	if v["url"] != url || v["location"] != "/workers/"+v["worker_id"].(string) || v["status"] != "accepted" {
		t.Fatalf("POST /workers answered %s", body)
	}
	return v["worker_id"].(string)
}

func TestWorkerAPIRegistersListsRoutesAndRemoves(t *testing.T) {
	release := make(chan struct{})
	streaming := heldStream(t, release, nil)
	others := []string{"http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11"}
	r := newRouter(t)
	g, admin, logs := adminGateway(t, r, Options{})
	if status, _, body := call(t, "GET", admin, "/readiness", "", "", nil); status != http.StatusServiceUnavailable || decode(t, body)["status"] != "not ready" {
		t.Fatalf("readiness without workers: %d %s", status, body)
	}
	ids := map[string]string{streaming.URL: register(t, admin, streaming.URL)}
	for _, u := range others {
		ids[u] = register(t, admin, u)
	}
	status, _, body := call(t, "GET", admin, "/workers", "", "", nil)
	listed := decode(t, body)
	if status != http.StatusOK || listed["total"] != 4.0 {
		t.Fatalf("GET /workers: %d %s", status, body)
	}
	for _, w := range listed["workers"].([]any) {
		w := w.(map[string]any)
		if ids[w["url"].(string)] != w["id"] || w["is_healthy"] != true {
			t.Fatalf("listed %v, registered %v", w, ids)
		}
	}
	if _, _, body := call(t, "GET", admin, "/workers/"+ids[streaming.URL], "", "", nil); decode(t, body)["url"] != streaming.URL {
		t.Fatalf("GET /workers/{id}: %s", body)
	}
	// Take every other worker out of routing so the stream goes to the one that answers.
	for _, u := range others {
		r.SetHealthy(u, false)
	}
	done := make(chan string)
	go func() {
		_, b := get(t, g, "/v1/completions", http.Header{"X-Smg-Routing-Key": {"session-1"}})
		done <- b
	}()
	waitLeases(t, r, 1)
	if status, _, body := call(t, "DELETE", admin, "/workers/"+ids[streaming.URL], "", "", nil); status != http.StatusAccepted {
		t.Fatalf("DELETE while streaming: %d %s", status, body)
	}
	close(release)
	if b := <-done; b != "data: a\n\ndata: b\n\n" {
		t.Fatalf("the stream on the removed worker ended as %q", b)
	}
	waitLeases(t, r, 0)
	if status, _, body := call(t, "GET", admin, "/list_workers", "", "", nil); status != http.StatusOK || len(decode(t, body)["urls"].([]any)) != 3 {
		t.Fatalf("/list_workers after the removal: %d %s", status, body)
	}
	for _, want := range []string{"worker added", "worker removed", "url=" + streaming.URL} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}

func TestOlderWorkerEndpoints(t *testing.T) {
	r := newRouter(t)
	_, admin, _ := adminGateway(t, r, Options{})
	if status, _, body := call(t, "POST", admin, "/add_worker?url="+unreachable, "", "", nil); status != http.StatusOK || body != "Successfully added worker: "+unreachable {
		t.Fatalf("/add_worker: %d %q", status, body)
	}
	if _, _, body := call(t, "GET", admin, "/list_workers", "", "", nil); body != `{"urls":["`+unreachable+`"]}`+"\n" {
		t.Fatalf("/list_workers: %q", body)
	}
	if status, _, body := call(t, "POST", admin, "/remove_worker?url="+unreachable, "", "", nil); status != http.StatusOK || body != "Successfully removed worker: "+unreachable {
		t.Fatalf("/remove_worker: %d %q", status, body)
	}
	if len(r.Workers()) != 0 {
		t.Fatalf("members left: %v", r.Workers())
	}
}

func TestWorkerAPIRefusesBadInput(t *testing.T) {
	r := newRouter(t, unreachable)
	_, admin, _ := adminGateway(t, r, Options{})
	known := (&controlPlane{}).workerID(core.WorkerState{ID: 999}) // a well-formed id no member has
	huge := `{"url":"http://127.0.0.1:12","pad":"` + strings.Repeat("x", maxControlBody) + `"}`
	cases := []struct {
		method, path, contentType, body string
		status                          int
		says                            string
	}{
		{"POST", "/workers", "application/json", `{"url":"not a url"}`, 400, "http:// or https://"},
		{"POST", "/workers", "application/json", `{"url":"ftp://127.0.0.1:12"}`, 400, "http:// or https://"},
		{"POST", "/workers", "application/json", `{"url":"HTTP://127.0.0.1:12"}`, 400, "lowercase"},
		{"POST", "/workers", "application/json", `{"url":"http://127.0.0.1:12/?a=1"}`, 400, "query"},
		{"POST", "/workers", "application/json", `{"url":"http://u:p@127.0.0.1:12"}`, 400, "user info"},
		{"POST", "/workers", "application/json", `{"url":""}`, 400, "http:// or https://"},
		{"POST", "/workers", "application/json", `{"nourl":1}`, 400, "field url is missing"},
		{"POST", "/workers", "application/json", `{"url":5}`, 400, "not a JSON object of the worker API"},
		{"POST", "/workers", "application/json", `{bad json`, 400, "not a JSON object"},
		{"POST", "/workers", "application/json", `{"url":"http://127.0.0.1:12"} {}`, 400, "trailing data"},
		{"POST", "/workers", "text/plain", `{"url":"http://127.0.0.1:12"}`, 400, "Content-Type: application/json"},
		{"POST", "/workers", "application/json", `{"url":"http://127.0.0.1:12","worker_type":"prefill"}`, 400, "worker_type"},
		{"POST", "/workers", "application/json", `{"url":"` + unreachable + `"}`, 409, "already exists"},
		{"POST", "/workers", "application/json", huge, 413, "at most 65536 bytes"},
		{"GET", "/workers/not-a-uuid", "", "", 400, "expected UUID"},
		{"GET", "/workers/" + known, "", "", 404, "not found"},
		{"DELETE", "/workers/" + known, "", "", 404, "not found"},
		{"POST", "/add_worker", "", "", 400, "url=<"},
		{"POST", "/add_worker?url=a&url=b", "", "", 400, "exactly one"},
		{"POST", "/add_worker?url=" + unreachable, "", "", 409, "already exists"},
		{"POST", "/remove_worker?url=http://127.0.0.1:13", "", "", 404, "not a member"},
		{"POST", "/workers", "application/json", `{"url":"http://127.0.0.1:12"}]`, 400, "trailing data"},
		{"POST", "/workers", "application/json", `{"url":"http://127.0.0.1:12"}}`, 400, "trailing data"},
		{"POST", "/workers", "application/json", `{"url":"` + unreachable + `/"}`, 409, "already exists"},
		{"PUT", "/workers/" + known, "application/json", `{}`, 405, "PUT is not allowed"},
		{"PUT", "/workers", "application/json", `{}`, 405, "PUT is not allowed"},
		{"PATCH", "/workers/" + known, "application/json", `{}`, 405, "PATCH is not allowed"},
		{"GET", "/add_worker", "", "", 405, "GET is not allowed"},
		{"GET", "/remove_worker", "", "", 405, "GET is not allowed"},
		{"POST", "/list_workers", "", "", 405, "POST is not allowed"},
		{"GET", "/workers/", "", "", 400, "expected UUID"},
		{"GET", "/workers/a/b", "", "", 400, "expected UUID"},
	}
	for _, c := range cases {
		status, header, body := call(t, c.method, admin, c.path, c.contentType, c.body, nil)
		if status != c.status || !strings.Contains(body, c.says) || !strings.Contains(body, `"code":`) || header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %.60q: %d %s %s, want %d saying %q in a JSON error", c.method, c.path, c.body, status, header.Get("Content-Type"), body, c.status, c.says)
		}
	}
	if len(r.Workers()) != 1 {
		t.Fatalf("bad input changed the members: %v", r.Workers())
	}
}

// A member is named by any spelling of its URL (contract: Workers and membership), and a worker
// added under another spelling is added, logged and answered as its normal form.
func TestWorkerAPIAcceptsAnySpellingOfAWorkerURL(t *testing.T) {
	r := newRouter(t)
	_, admin, logs := adminGateway(t, r, Options{})
	status, _, body := call(t, "POST", admin, "/workers", "application/json", `{"url":"`+unreachable+`/"}`, nil)
	if status != http.StatusAccepted || decode(t, body)["url"] != unreachable || !strings.Contains(logs.String(), "worker added") {
		t.Fatalf("POST /workers %s/: %d %s, members %v, log %q", unreachable, status, body, r.Workers(), logs.String())
	}
	if status, _, body := call(t, "POST", admin, "/remove_worker?url="+unreachable+"/", "", "", nil); status != http.StatusOK || len(r.Workers()) != 0 {
		t.Fatalf("/remove_worker?url=%s/: %d %s, members %v", unreachable, status, body, r.Workers())
	}
	if status, _, body := call(t, "POST", admin, "/add_worker?url="+unreachable+"/", "", "", nil); status != http.StatusOK || len(r.Workers()) != 1 {
		t.Fatalf("/add_worker?url=%s/: %d %s, members %v", unreachable, status, body, r.Workers())
	}
}

func TestWorkerAPIBodyTooLargeWithoutContentLength(t *testing.T) {
	for _, rest := range []string{
		`,"pad":"` + strings.Repeat("x", 2*maxControlBody) + `"}`,
		`}` + strings.Repeat(" ", 2*maxControlBody), // past the limit after the object
	} {
		r := newRouter(t)
		_, admin, _ := adminGateway(t, r, Options{})
		body := io.MultiReader(strings.NewReader(`{"url":"http://127.0.0.1:12"`), strings.NewReader(rest))
		req, _ := http.NewRequest("POST", admin+"/workers", io.NopCloser(body)) // chunked: no length known
		req.Header.Set("Content-Type", "application/json")
		res, err := client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || len(r.Workers()) != 0 {
			t.Fatalf("a chunked body past the limit (%.20q...): %d, members %v", rest, res.StatusCode, r.Workers())
		}
	}
}

func TestWorkerAPINotOnTheProxyPortByDefault(t *testing.T) {
	seen := make(chan string, 4)
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { seen <- r.Method + " " + r.URL.Path })
	r := newRouter(t, w.URL)
	g, _, _ := adminGateway(t, r, Options{})
	proxy := "http://" + g.Addr()
	call(t, "POST", proxy, "/workers", "application/json", `{"url":"http://127.0.0.1:12"}`, nil)
	if got := <-seen; got != "POST /workers" {
		t.Fatalf("the worker got %q", got)
	}
	if len(r.Workers()) != 1 {
		t.Fatalf("the proxy port changed the members: %v", r.Workers())
	}
	// The probes are the gateway's own on every port.
	if status, _, body := call(t, "GET", proxy, "/readiness", "", "", nil); status != 200 || decode(t, body)["healthy_workers"] != 1.0 {
		t.Fatalf("/readiness: %d %s", status, body)
	}
	for _, path := range []string{"/health", "/liveness"} {
		if status, _, body := call(t, "GET", proxy, path, "", "", nil); status != 200 || body != "OK" {
			t.Fatalf("%s: %d %q", path, status, body)
		}
	}
	if status, _, _ := call(t, "POST", proxy, "/health", "", "", nil); status != http.StatusMethodNotAllowed {
		t.Fatalf("POST /health: %d", status)
	}
	waitLeases(t, r, 0)
}

func TestWorkerAPIOnTheProxyPortWhenAskedFor(t *testing.T) {
	r := newRouter(t)
	g := start(t, r, Options{WorkerAPIOnProxyPort: true})
	g.control.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	register(t, "http://"+g.Addr(), unreachable)
	if len(r.Workers()) != 1 {
		t.Fatalf("members %v", r.Workers())
	}
}

func TestControlPlaneKeyRequiredOnEveryListener(t *testing.T) {
	r := newRouter(t)
	g, admin, logs := adminGateway(t, r, Options{ControlPlaneAPIKeys: []string{"first-key", "second-key"}})
	proxy := "http://" + g.Addr()
	for _, base := range []string{admin, proxy} {
		for _, header := range []http.Header{nil, {"Authorization": {"Bearer wrong"}}, {"Authorization": {"first-key"}}, {"Authorization": {"Basic Zmlyc3Qta2V5"}}} {
			for _, m := range []struct{ method, path string }{{"POST", "/workers"}, {"GET", "/workers"}, {"GET", "/list_workers"}, {"POST", "/add_worker?url=" + unreachable}, {"DELETE", "/workers/x"}} {
				status, h, body := call(t, m.method, base, m.path, "application/json", `{"url":"`+unreachable+`"}`, header)
				if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") != `Bearer realm="control-plane"` || !strings.Contains(body, "--control-plane-api-keys") {
					t.Fatalf("%s %s%s with %v: %d %s", m.method, base, m.path, header, status, body)
				}
			}
		}
		if status, _, _ := call(t, "GET", base, "/liveness", "", "", nil); status != http.StatusOK {
			t.Fatalf("the probes need no key: %d", status)
		}
	}
	if len(r.Workers()) != 0 {
		t.Fatalf("an unauthorized request changed the members: %v", r.Workers())
	}
	if !strings.Contains(logs.String(), "missing or wrong bearer key") {
		t.Errorf("refusals are not logged:\n%s", logs.String())
	}
	key := http.Header{"Authorization": {"Bearer second-key"}}
	if status, _, body := call(t, "POST", proxy, "/workers", "application/json", `{"url":"`+unreachable+`"}`, key); status != http.StatusAccepted {
		t.Fatalf("with the key: %d %s", status, body)
	}
	if status, _, _ := call(t, "GET", admin, "/workers", "", "", key); status != http.StatusOK {
		t.Fatalf("GET /workers with the key: %d", status)
	}
	// The scheme's name is case-insensitive (RFC 9110, 11.1); the key is not.
	for _, value := range []string{"bearer second-key", "BEARER second-key"} {
		if status, _, body := call(t, "GET", admin, "/workers", "", "", http.Header{"Authorization": {value}}); status != http.StatusOK {
			t.Fatalf("GET /workers with %q: %d %s", value, status, body)
		}
	}
	if status, _, _ := call(t, "GET", admin, "/workers", "", "", http.Header{"Authorization": {"Bearer SECOND-KEY"}}); status != http.StatusUnauthorized {
		t.Fatalf("a key in other case: %d", status)
	}
}

func TestControlPlaneKeysValidated(t *testing.T) {
	for _, c := range []struct {
		keys []string
		says string
	}{
		{[]string{""}, "control_plane_api_keys[0] must be 1 to 4096 visible ASCII"},
		{[]string{"ok", "has space"}, "control_plane_api_keys[1]"},
		{[]string{"caf\u00e9"}, "control_plane_api_keys[0]"},
		{[]string{strings.Repeat("k", maxControlPlaneKeyLen+1)}, "control_plane_api_keys[0]"},
		{make([]string, maxControlPlaneKeys+1), "at most 64 keys"},
	} {
		if err := (Options{ControlPlaneAPIKeys: c.keys}).Validate(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%d keys: %v, want %q", len(c.keys), err, c.says)
		}
	}
	o, err := ParseOptions([]byte(`{"control_plane_api_keys": ["k1"], "worker_api_on_proxy_port": true}`))
	if err != nil || len(o.ControlPlaneAPIKeys) != 1 || !o.WorkerAPIOnProxyPort {
		t.Fatalf("ParseOptions: %+v %v", o, err)
	}
}

func TestWorkerIDsAreNewForAWorkerAddedAgain(t *testing.T) {
	r := newRouter(t)
	_, admin, _ := adminGateway(t, r, Options{})
	first := register(t, admin, unreachable)
	if status, _, _ := call(t, "DELETE", admin, "/workers/"+first, "", "", nil); status != http.StatusAccepted {
		t.Fatal("DELETE failed")
	}
	second := register(t, admin, unreachable)
	if first == second || !isUUID(second) {
		t.Fatalf("ids %s then %s", first, second)
	}
	if status, _, _ := call(t, "DELETE", admin, "/workers/"+first, "", "", nil); status != http.StatusNotFound {
		t.Fatalf("the old id removed the new worker: %d", status)
	}
	if strings.ToUpper(second) == second {
		t.Fatal("ids are lowercase, as SMG's")
	}
	if status, _, _ := call(t, "GET", admin, "/workers/"+strings.ToUpper(second), "", "", nil); status != http.StatusOK {
		t.Fatalf("an id in uppercase: %d", status)
	}
}

// Regression (found by a review): DELETE /workers/{id} looked the id up, then removed the
// worker's URL, so a worker removed and added again at that URL in between was removed in its
// place, with a 202 naming the old id. Each round races the DELETE with that remove and add.
func TestDeleteByAnOldIDLeavesTheWorkerAddedAgain(t *testing.T) {
	r := newRouter(t)
	c := newControlPlane(r, nil, 0)
	if err := r.AddWorker(unreachable); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		old, _ := c.memberAt(unreachable)
		rec, readded := httptest.NewRecorder(), false
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			c.serveAPI(rec, httptest.NewRequest("DELETE", "/workers/"+c.workerID(old), nil))
		}()
		go func() {
			defer wg.Done()
			if readded = r.RemoveWorker(unreachable) == nil; readded {
				_ = r.AddWorker(unreachable) // a member again (the DELETE may have taken it since)
			}
		}()
		wg.Wait()
		_, member := c.memberAt(unreachable)
		if rec.Code == http.StatusAccepted && readded {
			t.Fatalf("round %d: DELETE of the old id answered 202 though that worker was removed first (the one added again a member: %v)", i, member)
		}
		if !member {
			if err := r.AddWorker(unreachable); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestWorkerAPIBodyTrickledPastTheBodyTimeoutIsCut(t *testing.T) {
	r := newRouter(t)
	_, admin, _ := adminGateway(t, r, Options{BodyTimeout: 0.2})
	res, body := raw(t, strings.TrimPrefix(admin, "http://"), "POST /workers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"url\":")
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "body_timeout") || len(r.Workers()) != 0 {
		t.Fatalf("a body that never ends: %d, members %v", res.StatusCode, r.Workers())
	}
}

// Regression (found by an audit): the gateway kept the parsed target of every worker URL it had
// ever routed to, so workers registered and deleted through the API grew it for good.
func TestWorkersRemovedThroughTheAPIAreForgotten(t *testing.T) {
	r := newRouter(t)
	g, admin, _ := adminGateway(t, r, Options{})
	for i := 0; i < 20; i++ {
		id := register(t, admin, "http://127.0.0.1:9/w"+itoa(int64(i))) // nothing listens on port 9
		get(t, g, "/v1/models", nil)                                    // routed there: 502
		if status, _, body := call(t, "DELETE", admin, "/workers/"+id, "", "", nil); status != http.StatusAccepted {
			t.Fatalf("DELETE: %d %s", status, body)
		}
	}
	register(t, admin, unreachable)
	get(t, g, "/v1/models", nil)
	if n := g.targets.size(); n != 1 {
		t.Fatalf("the gateway keeps %d workers' targets for 1 member", n)
	}
}
