package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/internal/loopback"
	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// storedPayload is a KVEventBatch storing one block of two tokens, in vLLM's field order.
func storedPayload(t *testing.T, hash uint64, parent any, tokens ...uint32) []byte {
	t.Helper()
	event := []any{"BlockStored", []uint64{hash}, parent, tokens, 2, nil, nil, nil}
	payload, err := msgpack.Marshal([]any{1.0, []any{event}})
	require.NoError(t, err)
	return payload
}

func seqFrame(seq int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(seq)) }

// A publisher and a replay ROUTER on loopback, as vLLM's ZmqEventPublisher: batches in order,
// a gap recovered by replay, garbage counted.
func TestSubscriberFollowsAStreamAndReplaysAGap(t *testing.T) {
	urls := []string{"http://127.0.0.1:1"}
	r := indexRouter(t, 64, urls...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pubEndpoint, replayEndpoint := loopback.FreeEndpoint(t), loopback.FreeEndpoint(t)
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	require.NoError(t, pub.Listen(pubEndpoint))
	replay := zmq4.NewRouter(ctx)
	defer replay.Close()
	require.NoError(t, replay.Listen(replayEndpoint))
	batches := map[int64][]byte{
		0: storedPayload(t, 100, nil, 1, 2),
		1: storedPayload(t, 101, uint64(100), 3, 4),
		2: storedPayload(t, 102, uint64(101), 5, 6),
		3: storedPayload(t, 103, uint64(102), 7, 8),
	}
	go func() { // the replay endpoint: every batch from the one asked, then the end marker
		for {
			msg, err := replay.Recv()
			if err != nil {
				return
			}
			id, from := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[len(msg.Frames)-1]))
			for seq := from; seq < 3; seq++ {
				_ = replay.SendMulti(zmq4.NewMsgFrom(id, []byte{}, seqFrame(seq), batches[seq]))
			}
			_ = replay.SendMulti(zmq4.NewMsgFrom(id, []byte{}, seqFrame(-1), []byte{}))
		}
	}()
	var logs []string
	s := &Subscriber{Index: r, Worker: urls[0], Endpoint: pubEndpoint, ReplayEndpoint: replayEndpoint, Logf: func(f string, a ...any) {
		logs = append(logs, fmt.Sprintf(f, a...))
	}}
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	send := func(frames ...[]byte) { require.NoError(t, pub.SendMulti(zmq4.NewMsgFrom(frames...))) }
	// A subscriber joins late (ZeroMQ's slow joiner): send the first batch until it is seen.
	loopback.WaitFor(t, "the first batch", func() bool { send([]byte{}, seqFrame(0), batches[0]); return s.Stats().Batches > 0 })
	send([]byte{}, seqFrame(1), batches[1])
	loopback.WaitFor(t, "batch 1", func() bool { return s.Stats().Batches == 2 })
	send([]byte{}, seqFrame(3), batches[3]) // 2 is missed: replayed before 3 is applied
	loopback.WaitFor(t, "batch 3", func() bool { return s.Stats().Batches == 4 })
	send([]byte("only two frames"), seqFrame(4))
	send([]byte{}, seqFrame(4), []byte{0xc1}) // 0xc1 is never used in msgpack
	loopback.WaitFor(t, "the garbage", func() bool { return s.Stats().Malformed == 2 })
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Gaps)
	assert.Equal(t, uint64(1), st.Replayed)
	assert.Equal(t, uint64(0), st.Lost)
	assert.Equal(t, uint64(4), st.Stored)
	// The four blocks chain as one prompt's: prefix_blocks of its tokens finds them all.
	prompt := make([]uint64, 4)
	_, err := core.HashPrefixBlocks(tokenBytes(1, 2, 3, 4, 5, 6, 7, 8), 8, prompt)
	require.NoError(t, err)
	for i, engine := range []uint64{100, 101, 102, 103} {
		block, ok := r.ReportedBlock(urls[0], engine)
		require.True(t, ok, "block %d", i)
		assert.Equal(t, prompt[i], block)
	}
	cancel()
	<-done
	assert.Len(t, logs, 1, "the malformed messages are logged once: %v", logs)
}

// Regression (found by a review): a replay that returned some of a gap's batches counted as lost
// only those after the last one it returned (the contract counts every batch it does not
// return). Sequence 0, then 10: the replay endpoint returns 8 alone, twice; 1-7 and 9 are lost.
func TestAPartialReplayCountsEveryBatchItDidNotReturn(t *testing.T) {
	urls := []string{"http://127.0.0.1:1"}
	r := indexRouter(t, 64, urls...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	endpoint := loopback.FreeEndpoint(t)
	replay := zmq4.NewRouter(ctx)
	defer replay.Close()
	require.NoError(t, replay.Listen(endpoint))
	go func() {
		msg, err := replay.Recv()
		if err != nil {
			return
		}
		id := msg.Frames[0]
		for i := 0; i < 2; i++ {
			_ = replay.SendMulti(zmq4.NewMsgFrom(id, []byte{}, seqFrame(8), storedPayload(t, 108, nil, 1, 2)))
		}
		_ = replay.SendMulti(zmq4.NewMsgFrom(id, []byte{}, seqFrame(-1), []byte{}))
	}()
	s := &Subscriber{Index: r, Worker: urls[0], ReplayEndpoint: endpoint, ReplayTimeout: 5 * time.Second}
	s.stats.last = -1
	s.receive(ctx, [][]byte{{}, seqFrame(0), storedPayload(t, 100, nil, 3, 4)})
	s.receive(ctx, [][]byte{{}, seqFrame(10), storedPayload(t, 110, nil, 5, 6)})
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Gaps)
	assert.Equal(t, uint64(1), st.Replayed, "batch 8, applied once")
	assert.Equal(t, uint64(8), st.Lost, "batches 1-7 and 9")
	assert.Equal(t, uint64(3), st.Batches)
}

// Regression (docs/contract.md, "KV events over the wire"): a replay cut short by the
// subscriber's stop counted the batches it was asking for as lost and logged the stop as a
// replay failure and a loss, for a healthy engine whose router was closing.
func TestAReplayCutShortByStopLosesAndLogsNothing(t *testing.T) {
	urls := []string{"http://127.0.0.1:1"}
	r := indexRouter(t, 64, urls...)
	endpoint := loopback.FreeEndpoint(t)
	replay := zmq4.NewRouter(context.Background())
	defer replay.Close()
	require.NoError(t, replay.Listen(endpoint))
	var logs []string
	s := &Subscriber{Index: r, Worker: urls[0], ReplayEndpoint: endpoint, ReplayTimeout: time.Minute,
		Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }}
	s.stats.last = -1
	s.logged = map[string]bool{}
	ctx, stop := context.WithCancel(context.Background())
	s.receive(ctx, [][]byte{{}, seqFrame(0), storedPayload(t, 100, nil, 3, 4)})
	done := make(chan struct{})
	go func() { s.receive(ctx, [][]byte{{}, seqFrame(5), storedPayload(t, 105, nil, 5, 6)}); close(done) }()
	_, err := replay.Recv() // the replay asked for: the engine never answers it
	require.NoError(t, err)
	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the replay did not end within 10 s of the stop")
	}
	assert.Zero(t, s.Stats().Lost)
	assert.Empty(t, logs)
}

// The same for a stop that comes before the replay's dial (found by the review of the fix above).
func TestAReplayStoppedBeforeItsDialLosesAndLogsNothing(t *testing.T) {
	urls := []string{"http://127.0.0.1:1"}
	r := indexRouter(t, 64, urls...)
	var logs []string
	s := &Subscriber{Index: r, Worker: urls[0], ReplayEndpoint: loopback.FreeEndpoint(t), ReplayTimeout: time.Minute,
		Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }}
	s.stats.last = -1
	s.logged = map[string]bool{}
	s.receive(context.Background(), [][]byte{{}, seqFrame(0), storedPayload(t, 100, nil, 3, 4)})
	ctx, stop := context.WithCancel(context.Background())
	stop()
	s.receive(ctx, [][]byte{{}, seqFrame(5), storedPayload(t, 105, nil, 5, 6)})
	assert.Zero(t, s.Stats().Lost)
	assert.Empty(t, logs)
}

// A publisher that floods (issue 21, "Bad input"): thousands of batches, each storing a block
// the worker never held, as fast as the socket takes them. Every batch is applied or counted
// lost, the worker's index stays within blocks_per_worker, and the engine names of the blocks
// it forgot are forgotten too.
func TestAFloodingPublisherLeavesTheIndexBounded(t *testing.T) {
	const flood, perWorker = 5000, 64
	urls := []string{"http://127.0.0.1:1"}
	r := indexRouter(t, perWorker, urls...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	endpoint := loopback.FreeEndpoint(t)
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	require.NoError(t, pub.Listen(endpoint))
	s := &Subscriber{Index: r, Worker: urls[0], Endpoint: endpoint}
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	send := func(seq int64) {
		payload := storedPayload(t, uint64(1000+seq), nil, uint32(2*seq), uint32(2*seq+1))
		require.NoError(t, pub.SendMulti(zmq4.NewMsgFrom([]byte{}, seqFrame(seq), payload)))
	}
	loopback.WaitFor(t, "the first batch", func() bool { send(0); return s.Stats().Batches > 0 })
	for seq := int64(1); seq <= flood; seq++ {
		send(seq)
	}
	loopback.WaitFor(t, "the last batch", func() bool { st := s.Stats(); return st.Batches+st.Lost >= flood+1 })
	st := s.Stats()
	assert.Equal(t, uint64(flood+1), st.Batches+st.Lost, "each batch applied once or counted lost")
	assert.Equal(t, uint64(0), st.Malformed)
	assert.Equal(t, perWorker, r.Workers()[0].IndexedBlocks, "the index holds the newest blocks_per_worker")
	_, ok := r.ReportedBlock(urls[0], 1000)
	assert.False(t, ok, "the first block was forgotten, with its engine name")
	_, ok = r.ReportedBlock(urls[0], 1000+flood)
	assert.True(t, ok, "the newest block is held")
	cancel()
	<-done
}

// Events that stop leave the worker stale after the stale age, by the clock the caller passes,
// and routing keeps what the index holds: the blocks this router routed there included.
func TestEventsThatStopLeaveTheWorkerStaleAndItsIndexServing(t *testing.T) {
	assert.True(t, Stats{}.Stale(time.Now(), time.Second), "no batch yet: stale")
	applied := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := Stats{LastBatch: applied}
	assert.False(t, st.Stale(applied.Add(10*time.Second), 10*time.Second))
	assert.True(t, st.Stale(applied.Add(10*time.Second+time.Millisecond), 10*time.Second))

	urls := []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}
	r := indexRouter(t, 64, urls...)
	batch, err := Decode(storedPayload(t, 100, nil, 1, 2))
	require.NoError(t, err)
	var counts Counts
	require.NoError(t, Apply(r, urls[1], batch, &counts)) // the last batch w1's engine sent
	routed := []uint64{7, 8, 9}
	d := r.Route(&core.Request{HasTarget: true, TargetIndex: 0, PrefixBlocks: routed})
	require.Equal(t, urls[0], d.WorkerURL)
	reported := make([]uint64, 1)
	_, err = core.HashPrefixBlocks(tokenBytes(1, 2), 8, reported)
	require.NoError(t, err)
	for worker, blocks := range map[string][]uint64{urls[0]: routed, urls[1]: reported} {
		d := r.Select(&core.Request{PrefixBlocks: blocks})
		assert.Equal(t, worker, d.WorkerURL)
		assert.Equal(t, core.BranchCacheAwarePrefixHit, d.Branch)
	}
}

// Regression (found by an audit): a restart was seen only when the numbering came back to
// exactly 0, but ZeroMQ drops what an engine publishes before the subscriber (redialling every
// second) reaches it, so the restarted engine's first batch seen is rarely 0: every batch up to
// the old engine's last number was then dropped as applied already, and no restart counted.
func TestARestartedEngineIsFollowedFromItsFirstBatchSeen(t *testing.T) {
	r, s, receive := oneEngine(t)
	urls := []string{s.Worker}
	for seq := int64(0); seq < 6; seq++ {
		receive(seq, uint64(100+seq), uint32(2*seq), uint32(2*seq+1))
	}
	receive(2, 900, 90, 91) // the restarted engine's third batch, its first two missed
	receive(3, 901, 92, 93)
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Restarts)
	assert.Equal(t, uint64(8), st.Batches)
	for _, engine := range []uint64{900, 901} {
		_, ok := r.ReportedBlock(urls[0], engine)
		assert.True(t, ok, "block %d of the restarted engine", engine)
	}
	assert.Equal(t, uint64(0), st.Gaps, "the restarted engine's numbering is followed, not replayed")
}

// Regression: a restarted engine starts with an empty cache, but the blocks its old run
// reported stayed in the index, so requests kept going to it for prefixes it no longer held.
func TestARestartForgetsTheOldEnginesBlocks(t *testing.T) {
	r, s, receive := oneEngine(t)
	urls := []string{s.Worker}
	for seq := int64(0); seq < 4; seq++ {
		receive(seq, uint64(100+seq), uint32(2*seq), uint32(2*seq+1))
	}
	receive(1, 900, 90, 91) // the restarted engine's second batch
	for seq := uint64(0); seq < 4; seq++ {
		_, ok := r.ReportedBlock(urls[0], 100+seq)
		assert.False(t, ok, "block %d of the engine before its restart", 100+seq)
	}
	_, ok := r.ReportedBlock(urls[0], 900)
	assert.True(t, ok, "the restarted engine's block")
	assert.Equal(t, uint64(1), s.Stats().Restarts)
}

// oneEngine is a cache_aware router of one worker with a subscriber for its engine, and a
// function that hands the subscriber a batch of one stored block.
func oneEngine(t *testing.T) (*core.Router, *Subscriber, func(seq int64, hash uint64, tokens ...uint32)) {
	urls := []string{"http://127.0.0.1:1"}
	r := indexRouter(t, 64, urls...)
	s := &Subscriber{Index: r, Worker: urls[0]}
	s.stats.last = -1
	return r, s, func(seq int64, hash uint64, tokens ...uint32) {
		s.receive(context.Background(), [][]byte{{}, seqFrame(seq), storedPayload(t, hash, nil, tokens...)})
	}
}
