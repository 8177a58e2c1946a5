package health

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Prober probes one worker and returns nil when it is healthy.
type Prober func(ctx context.Context, workerURL string) error

// maxProbeBody is how much of a probe's answer is read (and discarded) so its connection can
// be reused.
const maxProbeBody = 64 << 10

// HTTPProber probes with GET <worker URL><endpoint>: healthy when the worker answers 2xx before
// the context's deadline. It keeps at most one idle connection per worker, closed after three
// seconds idle, below the engines' own keep-alive (SGLang's and vLLM's close idle connections
// after about five), so a probe never picks a connection the worker has already closed.
func HTTPProber(endpoint string) Prober {
	client := &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     3 * time.Second,
			DisableCompression:  true,
		},
		// A redirect is an answer, not a healthy one.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return func(ctx context.Context, workerURL string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(workerURL, "/")+endpoint, nil)
		if err != nil {
			return err
		}
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, io.LimitReader(res.Body, maxProbeBody))
		res.Body.Close()
		if res.StatusCode < 200 || res.StatusCode > 299 {
			return fmt.Errorf("health check answered %d", res.StatusCode)
		}
		return nil
	}
}
