package core

// The blocks a worker's engine reports (docs/contract.md, "Reported blocks"): its KV cache
// events say which blocks it stored, which it evicted and when it dropped them all. They go
// into the same index as the blocks the router sent (blockIndex), so a worker's index is what its
// engine last reported plus what this process routed there since: a burst of requests sharing a
// prefix sees the first one's blocks before the engine's event for them arrives, and a worker
// whose events stop keeps the routing-time index alone.
//
// An engine names blocks its own way (vLLM and SGLang hash token ids with their own hash and
// extra keys); the index names them by this package's chained hash of the token ids, so that
// a request's prefix_blocks find them. Each node reported under an engine name is kept in the
// worker's engine map, so that a removal by that name finds the node; one entry per node at
// most, so the map is bounded by blocks_per_worker as the index is.

// storeReported makes w hold blocks as a route does (record), and names blocks[i] engine[i].
func (x *blockIndex) storeReported(w *worker, blocks, engine []uint64) {
	x.recordReport(w, blocks)
	for i, b := range blocks {
		if n, ok := w.blocks.nodes[b]; ok { // not when a report longer than the index pushed it out
			x.name(w, n, engine[i])
		}
	}
}

// recordReport makes w hold blocks as a route does, outside a routing decision (an engine's report,
// a peer's route).
func (x *blockIndex) recordReport(w *worker, blocks []uint64) {
	x.depth = 0 // the latest decision's path belongs to its request, not to this report
	x.record(w, blocks)
}

// name makes e the engine's name of node n of w, taking it from the node it named before, if
// any, and dropping n's previous name.
func (x *blockIndex) name(w *worker, n uint32, e uint64) {
	if w.blocks.engine == nil {
		w.blocks.engine = make(map[uint64]uint32)
	}
	node := &x.nodes[n]
	if old := node.engine; old != e && w.blocks.engine[old] == n {
		delete(w.blocks.engine, old)
	}
	if prev, ok := w.blocks.engine[e]; ok && prev != n {
		x.nodes[prev].engine = x.nodes[prev].block
	}
	w.blocks.engine[e] = n
	node.engine = e
}

// reported is w's node the engine calls e: the node its map names, else the node of block e
// (an engine that names blocks as we do, or a block routed again after the index forgot it).
func (x *blockIndex) reported(w *worker, e uint64) uint32 {
	if n, ok := w.blocks.engine[e]; ok {
		return n
	}
	return w.blocks.nodes[e]
}

// removeReported drops w's blocks the engine calls by the names given; unknown names are skipped.
func (x *blockIndex) removeReported(w *worker, engine []uint64) {
	for _, e := range engine {
		if n := x.reported(w, e); n != 0 {
			x.unlinkRecency(n)
			x.drop(w, n)
			x.release(n)
		}
	}
}

// StoreBlocks records that the engine of worker url reports holding blocks: this package's
// prefix block hashes (section "Prefix block hashes" of the contract), in prefix order. Each is
// then held as if a route had just sent it there, the first the most recent. engineHashes, nil
// or one per block, are the engine's own names of the blocks, by which RemoveBlocks finds them;
// nil means the engine names them as this package does.
func (r *Router) StoreBlocks(url string, blocks, engineHashes []uint64) error {
	if engineHashes == nil {
		engineHashes = blocks
	}
	if len(engineHashes) != len(blocks) {
		return invalid("engine_hashes must name each of the %d blocks, got %d", len(blocks), len(engineHashes))
	}
	if err := CheckBlockCount("blocks", uint64(len(blocks))); err != nil {
		return err
	}
	return r.withReports(url, func(x *blockIndex, w *worker) { x.storeReported(w, blocks, engineHashes) })
}

// RemoveBlocks records that the engine of worker url reports evicting the blocks it names
// engineHashes (see StoreBlocks); names it did not report, or that the index forgot, are ignored.
func (r *Router) RemoveBlocks(url string, engineHashes []uint64) error {
	if err := CheckBlockCount("engine_hashes", uint64(len(engineHashes))); err != nil {
		return err
	}
	return r.withReports(url, func(x *blockIndex, w *worker) { x.removeReported(w, engineHashes) })
}

// ClearBlocks records that the engine of worker url reports dropping every block: its index is
// emptied, the blocks routed there included.
func (r *Router) ClearBlocks(url string) error {
	return r.withReports(url, func(x *blockIndex, w *worker) { x.forget(w) })
}

// ReportedBlock is this package's hash of the block the engine of worker url calls engineHash,
// while the index holds it: how a consumer of an engine's events chains the hashes of blocks
// stored after a parent block.
func (r *Router) ReportedBlock(url string, engineHash uint64) (block uint64, ok bool) {
	err := r.withReports(url, func(x *blockIndex, w *worker) {
		if n := x.reported(w, engineHash); n != 0 {
			block, ok = x.nodes[n].block, true
		}
	})
	return block, ok && err == nil
}

// withReports runs apply on the index and the member url under the router's lock, or returns
// why not: the policy keeps no index, or url is not a member.
func (r *Router) withReports(url string, apply func(*blockIndex, *worker)) error {
	if r.view.blocks == nil {
		return invalid("block reports apply only to cache_aware, not %s", r.policy.Kind)
	}
	return r.changeWorker(url, func(w *worker) { apply(r.view.blocks, w) })
}
