package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkerIDsAreNeverReused: a worker that leaves and comes back, or a new worker, gets an id
// no decision has carried before, so a binding's id -> URL map can never name the wrong URL.
func TestWorkerIDsAreNeverReused(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, urls)
	seen := map[uint32]string{}
	idOf := func(url string) uint32 {
		// one worker at a time: every key lands on it
		for _, u := range urls {
			if u != url {
				require.NoError(t, r.SetHealthy(u, false))
			}
		}
		req := KeyRequest([]byte("k"))
		d := r.Select(&req)
		for _, u := range urls {
			require.NoError(t, r.SetHealthy(u, true))
		}
		require.Equal(t, url, d.WorkerURL)
		return d.WorkerID
	}
	for _, u := range urls {
		id := idOf(u)
		assert.NotContains(t, seen, id)
		seen[id] = u
	}
	for round := 0; round < 5; round++ {
		require.NoError(t, r.RemoveWorker(urls[1]))
		require.NoError(t, r.AddWorker(urls[1]))
		id := idOf(urls[1])
		assert.NotContains(t, seen, id, "round %d: id %d was %s's", round, id, seen[id])
		seen[id] = urls[1]
	}
	require.NoError(t, r.SetWorkers(urls))
	assert.Equal(t, seen[idOf(urls[0])], urls[0], "a worker that stays keeps its id")
}
