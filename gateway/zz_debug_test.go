package gateway

import (
	"testing"
)

func TestZZDebugWire(t *testing.T) {
	got := make(chan []byte, 1)
	addr, _ := rawWorker(t, answering("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", got))
	g := start(t, newRouter(t, "http://"+addr), Options{})
	res, body := get(t, g, "/v1/a%2Fb?x=%3F&y", nil)
	t.Logf("%d %q", res.StatusCode, body)
	t.Logf("worker got %q", <-got)
}
