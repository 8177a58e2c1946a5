package core

import (
	"fmt"
	"strconv"
	"testing"
)

// benchWorkerURLs returns n distinct worker URLs.
func benchWorkerURLs(n int) []string {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = "http://10.0.0." + strconv.Itoa(i) + ":8000"
	}
	return urls
}

// benchKeys returns routing keys spread over the ring.
func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte("session-" + strconv.Itoa(i))
	}
	return keys
}

// newBenchRouter builds a bounded router over n workers. With hot set, it holds leases so that
// one worker in four carries far more than the others: every request to those workers passes
// the relative test, so the minimum scan and the spill walk run on a large share of requests.
func newBenchRouter(b *testing.B, n int, hot bool) (*Router, []LeaseID) {
	b.Helper()
	r, err := NewRouter(DefaultConfig(benchWorkerURLs(n)...))
	if err != nil {
		b.Fatal(err)
	}
	var held []LeaseID
	if hot {
		for i, url := range benchWorkerURLs(n) {
			if i%4 != 0 {
				continue
			}
			for j := 0; j < 10; j++ {
				id, _, err := r.Acquire(url, nil)
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, id)
			}
		}
	}
	return r, held
}

func BenchmarkRouteRelease(b *testing.B) {
	keys := benchKeys(4096)
	for _, n := range []int{8, 64, 256, 1024} {
		for _, hot := range []bool{false, true} {
			name := fmt.Sprintf("workers=%d/loads=%s", n, map[bool]string{false: "idle", true: "skewed"}[hot])
			b.Run(name, func(b *testing.B) {
				r, _ := newBenchRouter(b, n, hot)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					req := KeyRequest(keys[i&4095])
					r.Release(r.Route(&req).Lease, false)
				}
			})
		}
	}
}

func BenchmarkRouteReleaseParallel(b *testing.B) {
	keys := benchKeys(4096)
	for _, n := range []int{64, 1024} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			r, _ := newBenchRouter(b, n, false)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					req := KeyRequest(keys[i&4095])
					r.Release(r.Route(&req).Lease, false)
					i++
				}
			})
		})
	}
}

// BenchmarkAddWorker measures one worker joining a membership of 1024 (the ring merge).
func BenchmarkAddWorker(b *testing.B) {
	urls := benchWorkerURLs(1025)
	r, err := NewRouter(DefaultConfig(urls[:1024]...))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := r.AddWorker(urls[1024]); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := r.RemoveWorker(urls[1024]); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkRingMemory reports the ring's bytes per virtual node at 1024 workers.
func BenchmarkRingMemory(b *testing.B) {
	urls := benchWorkerURLs(1024)
	var rg *ring
	for i := 0; i < b.N; i++ {
		rg = buildRing(urls, DefaultVirtualNodes)
	}
	bytes := cap(rg.positions)*8 + cap(rg.owners)*4
	b.ReportMetric(float64(bytes)/float64(len(rg.positions)), "bytes/vnode")
}
