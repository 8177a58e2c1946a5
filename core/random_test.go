package core

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRandomIsUniformOverAvailableWorkers(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, Policy{Kind: PolicyRandom}, urls)
	require.NoError(t, r.SetHealthy(urls[1], false))
	counts := map[string]int{}
	const n = 6000
	for i := 0; i < n; i++ {
		// Routing inputs are ignored by this policy.
		d := route(r, "same-key")
		require.Equal(t, BranchRandom, d.Branch)
		require.Equal(t, d.WorkerURL, d.PreferredURL)
		counts[d.WorkerURL]++
		require.True(t, r.Release(d.Lease, false))
	}
	assert.Zero(t, counts[urls[1]], "an unavailable worker is never chosen")
	for _, u := range []string{urls[0], urls[2], urls[3]} {
		assert.InDelta(t, n/3, counts[u], n/3*0.15, "%s: %v", u, counts)
	}
	assert.Equal(t, uint64(n), r.Stats().Branches[BranchRandom])
}

func TestRandomUsesTheViewsRandomIndex(t *testing.T) {
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyRandom}, urls)
	require.NoError(t, r.SetHealthy(urls[0], false))
	var asked []int
	r.view.randomIndex = func(n int) int { asked = append(asked, n); return n - 1 }
	req := Request{HasTarget: true, TargetIndex: 0} // ignored by random
	d := r.Select(&req)
	assert.Equal(t, BranchRandom, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL)
	assert.Equal(t, []int{2}, asked, "drawn among the available workers only")
}

func TestRandomNoHealthyWorkers(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyRandom}, urls)
	for _, u := range urls {
		require.NoError(t, r.SetHealthy(u, false))
	}
	d := route(r, "k")
	assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
	assert.Empty(t, d.WorkerURL)
	assert.Zero(t, d.Lease)

	empty := newTestRouter(t, Policy{Kind: PolicyRandom}, nil)
	d = route(empty, "k")
	assert.Equal(t, BranchNoHealthyWorkers, d.Branch)
}

// A seed makes a router's random choices repeatable: two routers of one seed, called alike
// (membership and health changes included), choose alike, and the choices are the seeded PCG's.
func TestSeededRandomRoutersChooseAlike(t *testing.T) {
	urls := workerURLs(5)
	seeded := func(seed uint64) *Router {
		return newTestRouter(t, Policy{Kind: PolicyRandom, Seed: seed, HasSeed: true}, urls)
	}
	choices := func(r *Router) []string {
		var got []string
		for i := 0; i < 200; i++ {
			switch i {
			case 50:
				require.NoError(t, r.SetHealthy(urls[2], false))
			case 120:
				require.NoError(t, r.RemoveWorker(urls[4]))
			}
			req := Request{RoutingKey: []byte("k"), Weight: int64(i%3 + 1)}
			got = append(got, r.Route(&req).WorkerURL)
		}
		return got
	}
	a, b := choices(seeded(42)), choices(seeded(42))
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, choices(seeded(43)), "another seed, other choices")

	// The first choices are those of an independent PCG of the same seed and stream.
	rng := rand.New(rand.NewPCG(42, seedStream))
	for i, url := range a[:50] {
		assert.Equal(t, urls[rng.IntN(len(urls))], url, "choice %d", i)
	}
	assert.ElementsMatch(t, urls, uniq(a[:50]), "every worker is chosen")
}

func uniq(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func TestSeedIsARandomSetting(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"type": "random", "seed": 18446744073709551615}`))
	require.NoError(t, err)
	assert.Equal(t, Policy{Kind: PolicyRandom, Seed: 1<<64 - 1, HasSeed: true}, p)
	text, err := p.MarshalJSON()
	require.NoError(t, err)
	assert.JSONEq(t, `{"type": "random", "seed": 18446744073709551615}`, string(text))
	p, err = ParsePolicy([]byte(`{"type": "random", "seed": 0}`))
	require.NoError(t, err)
	assert.True(t, p.HasSeed, "0 is a seed too")
	p, err = ParsePolicy([]byte(`{"type": "random"}`))
	require.NoError(t, err)
	assert.False(t, p.HasSeed)

	for _, bad := range []string{`-1`, `1.5`, `1e3`, `"7"`, `true`, `null`, `18446744073709551616`} {
		_, err := ParsePolicy([]byte(`{"type": "random", "seed": ` + bad + `}`))
		require.ErrorIs(t, err, ErrInvalidConfig, bad)
		assert.Contains(t, err.Error(), "seed must be an integer from 0 to 18446744073709551615, got "+bad)
	}
	for _, kind := range []string{"round_robin", "consistent_hashing", "bounded_consistent_hashing"} {
		_, err := ParsePolicy([]byte(`{"type": "` + kind + `", "seed": 1}`))
		require.ErrorIs(t, err, ErrInvalidConfig, kind)
		assert.Contains(t, err.Error(), "seed applies only to random, not "+kind)
		p := Policy{Kind: PolicyConsistentHashing, HasSeed: true}
		assert.ErrorContains(t, p.Validate(), "seed applies only to random")
	}
}
