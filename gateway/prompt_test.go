package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/bounded-router/bounded-router/core"
)

// textOf collects the prompt text writePrompt writes, and whether the body has a prompt.
type textOf struct{ strings.Builder }

func (*textOf) Full() bool { return false }

func promptText(body []byte) (string, bool) {
	var t textOf
	ok := writePrompt(body, &t)
	return t.String(), ok
}

// The cases of tests/python/test_prefix_proxies.py whose text the two implementations share.
func TestPromptTextIsRoleAndContentInOrderOrThePrompt(t *testing.T) {
	for body, want := range map[string]string{
		`{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": [{"type": "text", "text": "Look: "}]}]}`: "system\nYou are terse.\nuser\nLook: \n",
		`{"messages": [{"role": "user", "content": "hi"}, "junk", {"content": null}]}`:                                                       "user\nhi\n\n\n",
		`{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]}]}`:                   "user\n" + `{"image_url":{"detail":"low","url":"u"},"type":"image_url"}` + "\n",
		`{"prompt": "once upon a time"}`:    "once upon a time",
		`{"prompt": ["first", "second"]}`:   "first\nsecond",
		`{"messages": null, "prompt": "p"}`: "p",
		// encoding/json's reading, which the gateway keeps: the last of a repeated key, struct
		// fields by any case, null strings as empty, escapes and invalid bytes decoded.
		`{"prompt": "a", "prompt": "b"}`:                                "b",
		`{"prompt": ["x", null, "y"]}`:                                  "x\n\ny",
		`{"messages": [{"ROLE": "u", "Content": "c", "content": "d"}]}`: "u\nd\n",
		`{"prompt": "\u00e9\ud83d\ude00\ud800x\n\"\/"}`:                 "é😀\ufffdx\n\"/",
		"{\"prompt\": \"a\xffb\xed\xa0\x80\"}":                          "a\ufffdb\ufffd\ufffd\ufffd",
		`{"messages": [{"role": "u", "content": [{"type": "text", "type": null, "text": "t"}, {"type": 1, "text": "n"}, 2.50, "<&>"]}]}`: "u\nt" + `{"text":"n","type":1}2.5"\u003c\u0026\u003e"` + "\n",
	} {
		got, ok := promptText([]byte(body))
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q", body, got, ok, want)
		}
		if ref, refOK := referencePromptText([]byte(body)); ref != want || !refOK {
			t.Errorf("%s: the reference reads %q %v", body, ref, refOK)
		}
	}
}

func TestABodyWithoutATextPromptHasNone(t *testing.T) {
	for _, body := range []string{``, `{`, `[1, 2]`, `{"model": "m"}`, `{"prompt": [1, 2, 3]}`, `{"prompt": ""}`, `{"prompt": []}`, `{"messages": []}`, `{"prompt": "a"` + strings.Repeat(" ", 3),
		`{"prompt": "a"} x`, `{"prompt": "a\x01"}`, `{"prompt": "\q"}`, `{"prompt": "a", "n": 01}`, `null`, `{"prompt": null}`, `{"prompt": "a",}`, `{"prompt": "a", "x": [,1]}`, `{,"prompt": "a"}`, `{"prompt": "a", "x": [1,]}`,
		`{"prompt": "a", "deep": ` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`} {
		if text, ok := promptText([]byte(body)); ok {
			t.Errorf("%q: got a prompt %q", body, text)
		}
		if blocks := bodyPrefixBlocks([]byte(body), 4, 1<<20); blocks != nil {
			t.Errorf("%q: got blocks %x", body, blocks)
		}
	}
}

// hashes is core.HashPrefixBlocks of a whole text.
func hashes(t testing.TB, text string, blockLen int) []uint64 {
	out := make([]uint64, len(text)/blockLen)
	n, err := core.HashPrefixBlocks([]byte(text), blockLen, out)
	if err != nil {
		t.Fatal(err)
	}
	return out[:n]
}

func TestBodyPrefixBlocksHashTheTextCutToTheLimits(t *testing.T) {
	if got, want := bodyPrefixBlocks([]byte(`{"prompt": "abcdefghij"}`), 4, 1<<20), hashes(t, "abcdefghij", 4); !slices.Equal(got, want) || len(got) != 2 {
		t.Fatalf("%x, want %x", got, want)
	}
	long := strings.Repeat("ab", core.MaxPrefixBlocks+50)
	got := bodyPrefixBlocks([]byte(`{"prompt": "`+long+`"}`), 2, 1<<30)
	if len(got) != core.MaxPrefixBlocks || !slices.Equal(got, hashes(t, long[:2*core.MaxPrefixBlocks], 2)) {
		t.Fatalf("a prompt over the limit gave %d blocks, want the first %d", len(got), core.MaxPrefixBlocks)
	}
	// prefix_max_bytes: the blocks of the text's first max bytes, across messages.
	body := `{"messages": [{"role": "user", "content": "` + strings.Repeat("x", 100) + `"}, {"role": "a", "content": "more"}]}`
	text, _ := promptText([]byte(body))
	if got := bodyPrefixBlocks([]byte(body), 8, 50); !slices.Equal(got, hashes(t, text[:50], 8)) || len(got) != 6 {
		t.Fatalf("cut to 50 bytes: %d blocks %x", len(got), got)
	}
	if got := bodyPrefixBlocks([]byte(body), 8, 7); got != nil {
		t.Fatalf("less than a block: %x", got)
	}
}

// The gateway's text against encoding/json's reading of the same body (the implementation it
// replaced, referencePromptText), for any body the fuzzer makes: the same prompt or none, and the
// same blocks, cut or not.
func FuzzPromptTextMatchesEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a\u00e9"}, {"type": "image_url", "image_url": {"url": "u"}}]}]}`,
		`{"prompt": ["a", "b", null]}`, `{"prompt": "x\ud83d\ude00y"}`, `{"messages": null, "prompt": "p"}`, `{"Messages": [], "prompt": "q"}`,
		`{"messages": [{"role": 1, "content": {"a": 1}}, null, [], {"ROLE": "r"}]}`, `{"messages": [{"content": [1e400, -0.0, 1E+2, "\u003c", {"b": [true, false, null], "a": "\ud800"}]}]}`,
		"{\"prompt\": \"\xc3\x28 \xf0\x9f\x98\"}", ` { "prompt" : "spaced" } `, `{"prompt": "a", "prompt": 5}`,
	} {
		f.Add([]byte(seed), 5, 1<<20)
	}
	f.Fuzz(func(t *testing.T, body []byte, blockLen, maxBytes int) {
		blockLen, maxBytes = 1+abs(blockLen)%64, abs(maxBytes)%(1<<22)
		want, wantOK := referencePromptText(body)
		got, ok := promptText(body)
		if got != want || ok != wantOK {
			t.Fatalf("%q: %q %v, encoding/json reads %q %v", body, got, ok, want, wantOK)
		}
		blocks := bodyPrefixBlocks(body, blockLen, maxBytes)
		cut := want[:min(len(want), maxBytes, core.MaxPrefixBlocks*blockLen)]
		if wantBlocks := hashes(t, cut, blockLen); !slices.Equal(blocks, wantBlocks) && (len(blocks) > 0 || len(wantBlocks) > 0) {
			t.Fatalf("%q: %d blocks, want %d", body, len(blocks), len(wantBlocks))
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

// A 4 MB prompt's blocks cost the blocks: no copy of the body, its text or a JSON tree.
func TestALargePromptIsHashedInPlace(t *testing.T) {
	body := []byte(`{"messages": [{"role": "user", "content": "` + strings.Repeat("word ", 800_000) + `"}]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	blocks := bodyPrefixBlocks(body, 64, 1<<20)
	runtime.ReadMemStats(&after)
	if len(blocks) != (1<<20)/64 {
		t.Fatalf("%d blocks", len(blocks))
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 2*uint64(len(body))/64*8 {
		t.Fatalf("%d bytes allocated for a %d-byte body", allocated, len(body))
	}
}

// referencePromptText is the gateway's prompt text as encoding/json reads a body, the
// implementation jsonScanner replaced (with one fix: a text part whose text is null is a part
// like any other, where it wrote the previous part's text again).
func referencePromptText(body []byte) (string, bool) {
	var document map[string]json.RawMessage
	if json.Unmarshal(body, &document) != nil {
		return "", false
	}
	var messages []json.RawMessage
	if json.Unmarshal(document["messages"], &messages) == nil && messages != nil {
		var b strings.Builder
		for _, m := range messages {
			referenceMessage(&b, m)
		}
		return b.String(), b.Len() > 0
	}
	var prompt string
	if json.Unmarshal(document["prompt"], &prompt) == nil {
		return prompt, prompt != ""
	}
	var prompts []string
	if json.Unmarshal(document["prompt"], &prompts) == nil && len(prompts) > 0 {
		return strings.Join(prompts, "\n"), true
	}
	return "", false
}

func referenceMessage(b *strings.Builder, raw json.RawMessage) {
	var message struct {
		Role    json.RawMessage `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &message) != nil || !bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{")) {
		return
	}
	var role string
	_ = json.Unmarshal(message.Role, &role)
	b.WriteString(role)
	b.WriteByte('\n')
	referenceContent(b, message.Content)
	b.WriteByte('\n')
}

func referenceContent(b *strings.Builder, raw json.RawMessage) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		b.WriteString(text)
		return
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return
	}
	for _, part := range parts {
		var p struct {
			Type string          `json:"type"`
			Text json.RawMessage `json:"text"`
		}
		var text *string
		isObject := bytes.HasPrefix(bytes.TrimLeft(part, " \t\r\n"), []byte("{"))
		if json.Unmarshal(part, &p) == nil && isObject && p.Type == "text" && json.Unmarshal(p.Text, &text) == nil && text != nil {
			b.WriteString(*text)
			continue
		}
		var value any
		if json.Unmarshal(part, &value) == nil {
			compact, _ := json.Marshal(value)
			b.Write(compact)
		}
	}
}

func TestPrefixBlockOptions(t *testing.T) {
	o, err := ParseOptions([]byte(`{"prefix_blocks": "text", "prefix_block_bytes": 16}`))
	if err != nil || o.PrefixBlocks != "text" || o.PrefixBlockBytes != 16 {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err = ParseOptions(nil); err != nil || o.PrefixBlocks != "off" || o.PrefixBlockBytes != 64 || o.PrefixMaxBytes != 1<<20 {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	if o, err = ParseOptions([]byte(`{"prefix_max_bytes": 4096}`)); err != nil || o.PrefixMaxBytes != 4096 {
		t.Fatalf("%+v %v", o, err)
	}
	for text, field := range map[string]string{`{"prefix_blocks": "words"}`: "prefix_blocks", `{"prefix_block_bytes": -1}`: "prefix_block_bytes", `{"prefix_max_bytes": -1}`: "prefix_max_bytes"} {
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

// cacheAwareRouter is a cache_aware router over n workers that read and drop each body.
func cacheAwareRouter(t *testing.T, n int) (*core.Router, []string) {
	var urls []string
	for range n {
		urls = append(urls, worker(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }).URL)
	}
	cfg := core.DefaultConfig(urls...)
	cfg.Policy = core.Policy{Kind: core.PolicyCacheAware, MaxLoadSkew: 1.5, MinLoadGap: 2, CacheAware: core.CacheAwareSettings{BlocksPerWorker: 1024}}
	r, err := core.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, urls
}

// Under cache_aware, the option's blocks reach the router: a second request with the same
// prompt is a prefix hit on the worker the first went to, and the router counts its blocks.
func TestPrefixBlocksOptionFeedsCacheAware(t *testing.T) {
	r, _ := cacheAwareRouter(t, 3)
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

// BenchmarkBodyPrefixBlocks is the option's cost per body, against the encoding/json reading it
// replaced (referencePromptText, then the hash of the text cut to the same limit).
func BenchmarkBodyPrefixBlocks(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 4 << 20} {
		var messages []string
		for n := 0; n*1100 < size; n++ {
			messages = append(messages, `{"role": "user", "content": "`+strings.Repeat("word of the conversation ", 44)+`"}`)
		}
		body := []byte(`{"model": "m", "messages": [` + strings.Join(messages, ", ") + `]}`)
		b.Run(fmt.Sprintf("bytes=%d/scanner", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for range b.N {
				bodyPrefixBlocks(body, 64, 1<<20)
			}
		})
		b.Run(fmt.Sprintf("bytes=%d/encoding_json", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for range b.N {
				text, _ := referencePromptText(body)
				hashes(b, text[:min(len(text), 1<<20)], 64)
			}
		})
	}
}
