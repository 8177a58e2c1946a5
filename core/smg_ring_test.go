package core

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smgRecording is a key -> worker table recorded from the real SMG gateway by
// scripts/record_smg_ring.py.
type smgRecording struct {
	RecordedBy string            `json:"recorded_by"`
	SMGVersion string            `json:"smg_version"`
	Policy     string            `json:"policy"`
	WorkerURLs []string          `json:"worker_urls"`
	Routes     map[string]string `json:"routes"`
}

func readSMGRecording(t *testing.T, workers int) smgRecording {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "tests", "testdata", fmt.Sprintf("smg_ring_%d.json", workers)))
	require.NoError(t, err)
	var rec smgRecording
	require.NoError(t, decodeStrict(data, &rec))
	require.Equal(t, "smg 1.13.0", rec.SMGVersion)
	require.Equal(t, "consistent_hashing", rec.Policy)
	require.Len(t, rec.WorkerURLs, workers)
	require.GreaterOrEqual(t, len(rec.Routes), 1000)
	return rec
}

// TestSMGRingMatchesTheRecordedGateway routes every recorded key with hash_ring smg, as an
// explicit key and as an implicit one (SMG hashes both on the same ring), under both hashing
// policies, and expects the worker SMG chose, for every key.
func TestSMGRingMatchesTheRecordedGateway(t *testing.T) {
	for _, workers := range []int{2, 4, 8} {
		rec := readSMGRecording(t, workers)
		for _, kind := range []PolicyKind{PolicyConsistentHashing, PolicyBoundedConsistentHashing} {
			policy := Policy{Kind: kind, MaxLoadSkew: DefaultMaxLoadSkew, MinLoadGap: DefaultMinLoadGap, HashRing: HashRingSMG}
			r := newTestRouter(t, policy, rec.WorkerURLs)
			for key, want := range rec.Routes {
				explicit := KeyRequest([]byte(key))
				require.Equal(t, want, r.Select(&explicit).WorkerURL, "%d workers, %s, key %q", workers, kind, key)
				implicit := Request{ImplicitKey: []byte(key)}
				require.Equal(t, want, r.Select(&implicit).WorkerURL, "%d workers, %s, implicit key %q", workers, kind, key)
			}
		}
	}
}

// TestXXH64RingDisagreesWithTheRecordedGateway shows the recordings tell the rings apart: the
// default ring agrees with SMG only by chance, on about 1/n of the keys.
func TestXXH64RingDisagreesWithTheRecordedGateway(t *testing.T) {
	for _, workers := range []int{2, 4, 8} {
		rec := readSMGRecording(t, workers)
		r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, rec.WorkerURLs)
		agree := 0
		for key, want := range rec.Routes {
			req := KeyRequest([]byte(key))
			if r.Select(&req).WorkerURL == want {
				agree++
			}
		}
		assert.Less(t, float64(agree)/float64(len(rec.Routes)), 1.5/float64(workers), "%d workers", workers)
	}
}
