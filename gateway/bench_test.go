package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/bounded-router/bounded-router/health"
)

// BenchmarkProxy is one small completion through the gateway on loopback (client, gateway and
// worker in this process): for profiles of the request path, not for comparisons (see
// scripts/bench_gateway.py).
func BenchmarkProxy(b *testing.B) {
	w := worker(&testing.T{}, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":" tok tok tok tok"}]}`)
	})
	defer w.Close()
	r, _ := newRouterB(w.URL)
	g, err := Start(health.New(r, health.Options{}), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Shutdown(0)
	c := client()
	url := "http://" + g.Addr() + "/v1/completions"
	body := `{"prompt":"hello world","max_tokens":4}`
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("X-SMG-Routing-Key", "key")
		res, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}
