package gateway

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/bounded-router/bounded-router/core"
)

// The cases of tests/python/test_prefix_proxies.py whose text the two implementations share.
func TestPromptTextIsRoleAndContentInOrderOrThePrompt(t *testing.T) {
	for body, want := range map[string]string{
		`{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": [{"type": "text", "text": "Look: "}]}]}`: "system\nYou are terse.\nuser\nLook: \n",
		`{"messages": [{"role": "user", "content": "hi"}, "junk", {"content": null}]}`:                                                       "user\nhi\n\n\n",
		`{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]}]}`:                   "user\n" + `{"image_url":{"detail":"low","url":"u"},"type":"image_url"}` + "\n",
		`{"prompt": "once upon a time"}`:    "once upon a time",
		`{"prompt": ["first", "second"]}`:   "first\nsecond",
		`{"messages": null, "prompt": "p"}`: "p",
	} {
		got, ok := promptText([]byte(body))
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q", body, got, ok, want)
		}
	}
}

func TestABodyWithoutATextPromptHasNone(t *testing.T) {
	for _, body := range []string{``, `{`, `[1, 2]`, `{"model": "m"}`, `{"prompt": [1, 2, 3]}`, `{"prompt": ""}`, `{"prompt": []}`, `{"messages": []}`, `{"prompt": "a"` + strings.Repeat(" ", 3)} {
		if text, ok := promptText([]byte(body)); ok {
			t.Errorf("%q: got a prompt %q", body, text)
		}
		if blocks := bodyPrefixBlocks([]byte(body), 4); blocks != nil {
			t.Errorf("%q: got blocks %x", body, blocks)
		}
	}
}

func TestBodyPrefixBlocksHashTheTextCutToTheLimit(t *testing.T) {
	hashes := func(text string, blockLen int) []uint64 {
		out := make([]uint64, len(text)/blockLen)
		n, err := core.HashPrefixBlocks([]byte(text), blockLen, out)
		if err != nil {
			t.Fatal(err)
		}
		return out[:n]
	}
	if got, want := bodyPrefixBlocks([]byte(`{"prompt": "abcdefghij"}`), 4), hashes("abcdefghij", 4); !slices.Equal(got, want) || len(got) != 2 {
		t.Fatalf("%x, want %x", got, want)
	}
	long := strings.Repeat("ab", core.MaxPrefixBlocks+50)
	got := bodyPrefixBlocks([]byte(`{"prompt": "`+long+`"}`), 2)
	if len(got) != core.MaxPrefixBlocks || !slices.Equal(got, hashes(long[:2*core.MaxPrefixBlocks], 2)) {
		t.Fatalf("a prompt over the limit gave %d blocks, want the first %d", len(got), core.MaxPrefixBlocks)
	}
}

func TestPrefixBlockOptions(t *testing.T) {
	o, err := ParseOptions([]byte(`{"prefix_blocks": "text", "prefix_block_bytes": 16}`))
	if err != nil || o.PrefixBlocks != "text" || o.PrefixBlockBytes != 16 {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err = ParseOptions(nil); err != nil || o.PrefixBlocks != "off" || o.PrefixBlockBytes != 64 {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	for text, field := range map[string]string{`{"prefix_blocks": "tokens"}`: "prefix_blocks", `{"prefix_block_bytes": -1}`: "prefix_block_bytes"} {
		if _, err := ParseOptions([]byte(text)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", text, err)
		}
	}
}

// With the option on, any body is still forwarded as it came: a prompt, no JSON, a large one.
func TestPrefixBlocksOptionForwardsEveryBodyUntouched(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })
	r := newRouter(t, w.URL)
	g := start(t, r, Options{PrefixBlocks: "text", PrefixBlockBytes: 8})
	for _, body := range []string{`{"prompt": "hello there, worker"}`, `{not json`, `{"prompt": "` + strings.Repeat("x", 1<<20) + `"}`} {
		res, err := client().Post("http://"+g.Addr()+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !bytes.Equal(got, []byte(body)) {
			t.Fatalf("status %d, %d bytes back of %d", res.StatusCode, len(got), len(body))
		}
	}
	waitLeases(t, r, 0)
}

// Under cache_aware, the option's blocks reach the router: a second request with the same
// prompt is a prefix hit on the worker the first went to, and the router counts its blocks.
func TestPrefixBlocksOptionFeedsCacheAware(t *testing.T) {
	var urls []string
	for i := 0; i < 3; i++ {
		urls = append(urls, worker(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }).URL)
	}
	cfg := core.DefaultConfig(urls...)
	cfg.Policy = core.Policy{Kind: core.PolicyCacheAware, MaxLoadSkew: 1.5, MinLoadGap: 2, BlocksPerWorker: 1024}
	r, err := core.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, r, Options{PrefixBlocks: "text", PrefixBlockBytes: 8, ExposeRoutingHeaders: true})
	body := `{"messages": [{"role": "user", "content": "the same long question, asked twice"}]}`
	var workers, branches []string
	for range 2 {
		res, err := client().Post("http://"+g.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		workers, branches = append(workers, res.Header.Get(HeaderWorker)), append(branches, res.Header.Get(HeaderBranch))
		waitLeases(t, r, 0)
	}
	text, _ := promptText([]byte(body))
	blocks := uint64(len(text) / 8)
	if workers[0] != workers[1] || branches[0] != "cache_aware_no_match" || branches[1] != "cache_aware_prefix_hit" {
		t.Fatalf("workers %v, branches %v", workers, branches)
	}
	if s := r.Stats(); s.PrefixBlocks != 2*blocks || s.PrefixBlocksMatched != blocks {
		t.Fatalf("router counted %d blocks, %d matched; want %d and %d", s.PrefixBlocks, s.PrefixBlocksMatched, 2*blocks, blocks)
	}
}
