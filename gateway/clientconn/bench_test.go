package clientconn

import "testing"

// BenchmarkWatch is the per-request cost of noticing a client that leaves: one Watch and its
// stop on a connection whose client stays.
func BenchmarkWatch(b *testing.B) {
	l := listen(b, Options{})
	c, _ := pair(b, l)
	left := func() {}
	b.ReportAllocs()
	for range b.N {
		stop := c.Watch(left)
		stop()
	}
}
