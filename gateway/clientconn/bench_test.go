package clientconn

import (
	"net"
	"testing"
)

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

// BenchmarkAcceptClose is what a connection's life costs beside a plain listener's: the
// registration at Accept, and at Close the removal and the linger (a client that closes at
// once, as one that has read the answer does).
func BenchmarkAcceptClose(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		benchAcceptClose(b, ln)
	})
	b.Run("clientconn", func(b *testing.B) { benchAcceptClose(b, listen(b, Options{})) })
}

func benchAcceptClose(b *testing.B, ln net.Listener) {
	b.ReportAllocs()
	for range b.N {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		client.Close()
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
