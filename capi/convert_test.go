package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bounded-router/bounded-router/core"
)

func TestStatusOfEachErrorKind(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{
		{errInvalidHandle, statusInvalidHandle},
		{fmt.Errorf("%w: %q", core.ErrUnknownWorker, "x"), statusUnknownWorker},
		{fmt.Errorf("%w: %q", core.ErrDuplicateWorker, "x"), statusDuplicateWorker},
		{fmt.Errorf("%w: virtual_nodes", core.ErrInvalidConfig), statusInvalidArgument},
		{invalidArgument("out must not be NULL"), statusInvalidArgument},
		{errUnknownLease, statusInvalidArgument},
		{errors.New("something unforeseen"), statusInternal},
	} {
		assert.EqualValues(t, c.status, fail(c.err), c.err.Error())
	}
	// A pointer or length problem is an invalid argument, not a configuration error.
	assert.NotContains(t, invalidArgument("out must not be NULL").Error(), "configuration")
}

func TestHeaderBlocks(t *testing.T) {
	block := []byte("\x06\x00\x00\x00Cookie\x01\x00\x00\x00c\x00\x00\x00\x00\x00\x00\x00\x00")
	require.NoError(t, checkHeaderBlock(block))
	var got [][2]string
	for name, value := range headerPairs(block) {
		got = append(got, [2]string{string(name), string(value)})
	}
	assert.Equal(t, [][2]string{{"Cookie", "c"}, {"", ""}}, got)
	for _, truncated := range []string{"\x01", "\x06\x00\x00\x00Cook", "\x01\x00\x00\x00a\x09\x00\x00\x00short", "\xff\xff\xff\xff"} {
		err := checkHeaderBlock([]byte(truncated))
		require.ErrorIs(t, err, errInvalidArgument, "%q", truncated)
		assert.Contains(t, err.Error(), "headers")
	}
}

func TestKeyBlocks(t *testing.T) {
	assert.NoError(t, checkKeyBlock([]byte("abcd"), []uint32{1, 0, 3}))
	err := checkKeyBlock([]byte("abcd"), []uint32{1, 2})
	require.ErrorIs(t, err, errInvalidArgument)
	assert.Contains(t, err.Error(), "keys_len")
	// Lengths whose sum overflows 32 bits are added in 64.
	assert.Error(t, checkKeyBlock(nil, []uint32{1 << 31, 1 << 31}))
}

// Regression (found by an audit): timeout_ms * 1 ms overflowed a Duration for a large
// timeout, which then fell back to shutdown_timeout and cut requests early.
func TestDrainTimeoutNeverOverflows(t *testing.T) {
	for ms, want := range map[int64]time.Duration{
		3000: 3 * time.Second, 0: 0, -5: -5 * time.Millisecond,
		1 << 62: time.Duration(math.MaxInt64), math.MaxInt64: time.Duration(math.MaxInt64),
	} {
		assert.Equal(t, want, drainTimeout(ms), "%d ms", ms)
	}
}

// A feed's goroutine that panics ends that feed and is logged; it must not end the host
// process, which no exported function's recover would save (a panic on another goroutine).
func TestAFeedThatPanicsEndsAloneAndTheProcessLives(t *testing.T) {
	handle, err := startFeed(nil, func(context.Context) { panic("a decoder bug") }, func() any { return nil })
	if err != nil {
		t.Fatal(err)
	}
	feeds.Lock()
	f := feeds.running[handle]
	feeds.Unlock()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the feed did not end")
	}
	assert.NoError(t, stopFeed(handle), "stopped like any feed")
}

// br_members_json's hand-written answer decodes, with encoding/json, to the ids and URLs that
// Workers reports, in membership order, URLs that JSON escapes included.
func TestMembersJSONNamesEveryMemberAsWorkersDoes(t *testing.T) {
	urls := []string{"http://127.0.0.1:1", "http://127.0.0.1:2/a&b<c>", "http://[::1]:3/é\"q"}
	r, err := core.NewRouter(core.Config{WorkerURLs: urls, Policy: core.DefaultConfig().Policy, VirtualNodes: 8})
	require.NoError(t, err)
	require.NoError(t, r.RemoveWorker(urls[0]))
	require.NoError(t, r.AddWorker(urls[0])) // a new id, now last
	var pairs [][2]any
	require.NoError(t, json.Unmarshal(membersJSON(r.Members()), &pairs))
	workers := r.Workers()
	require.Len(t, pairs, len(workers))
	for i, w := range workers {
		assert.Equal(t, float64(w.ID), pairs[i][0], "member %d's id", i)
		assert.Equal(t, w.URL, pairs[i][1], "member %d's URL", i)
	}
	var none []any
	require.NoError(t, json.Unmarshal(membersJSON(nil), &none))
	assert.Empty(t, none)
}
