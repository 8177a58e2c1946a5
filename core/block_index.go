package core

import "math"

// blockIndex is cache_aware's approximate record of the prefix blocks the router has sent to
// each worker (docs/contract.md, "cache_aware"): per worker, at most a fixed number of blocks,
// least recently sent forgotten first.
//
// Each (worker, block) pair is one node. A node is linked into two lists: its worker's recency
// list (a ring through the worker's sentinel node, most recent first) and its block's holder
// list (every worker holding the block, in no particular order), whose head byBlock finds. A
// worker's own map finds its node of a block. So "who holds block b" costs one lookup, and
// "does w hold b" another, whatever the number of workers. Nodes of evicted or forgotten pairs
// go to a free list and are reused: once the index has grown to its working size, recording a
// request allocates nothing.
type blockIndex struct {
	// nodes[0] is unused, so that 0 can mean "none" in every link.
	nodes []blockNode
	// free is the first free node, the others linked through older; 0 when none is free.
	free uint32
	// byBlock is the first node of each block's holder list.
	byBlock map[uint64]uint32
	// capacity is the most blocks one worker's index holds (blocks_per_worker).
	capacity int
	// size is the number of indexed (worker, block) pairs, over all workers.
	size int
	// epoch stamps the candidates of the latest decision (worker.candidate), and depth is the
	// number of leading blocks it matched: the decision's scratch, which the router reads to
	// count the blocks the chosen worker matched.
	epoch uint64
	depth int
	// path[i], for i < depth, is the node of a passing holder of the request's block i that
	// the decision found: recording the request on that worker then needs no lookup. Valid
	// while its node still holds that block for that worker (record checks).
	path []uint32
}

type blockNode struct {
	block uint64
	// engine is the engine's name of the block when its worker reported it (see storeReported),
	// else the block itself; the worker's engine map points here only while it names this node.
	engine uint64
	worker *worker
	// newer and older link the worker's recency list, a ring through its sentinel: the
	// sentinel's older is the most recent node, its newer the least recent.
	newer, older uint32
	// prevHolder and nextHolder link the block's holder list (0 ends it).
	prevHolder, nextHolder uint32
}

// workerBlocks is one worker's part of the index.
type workerBlocks struct {
	sentinel uint32            // 0 until the worker is first sent a block
	nodes    map[uint64]uint32 // block -> its node
	// engine maps the engine's names of the blocks its worker reported to their nodes, so that a
	// removal the engine reports by its own name finds ours; nil until the first report. It holds
	// at most one entry per node (block_events.go).
	engine map[uint64]uint32
}

func newBlockIndex(capacity int) *blockIndex {
	return &blockIndex{nodes: make([]blockNode, 1), byBlock: make(map[uint64]uint32), capacity: capacity}
}

// firstHolder is the first node of the block's holder list, 0 when no worker holds it; walk
// on with nodes[n].nextHolder.
func (x *blockIndex) firstHolder(block uint64) uint32 { return x.byBlock[block] }

// anyHolder reports whether some worker holding the block satisfies accept.
func (x *blockIndex) anyHolder(block uint64, accept func(w *worker) bool) bool {
	return x.holderWhere(block, accept) != 0
}

// holderWhere is the node of the first worker holding the block that satisfies accept, or 0.
func (x *blockIndex) holderWhere(block uint64, accept func(w *worker) bool) uint32 {
	for n := x.byBlock[block]; n != 0; n = x.nodes[n].nextHolder {
		if accept(x.nodes[n].worker) {
			return n
		}
	}
	return 0
}

// extendPath records n as the path's node of the next block (see path).
func (x *blockIndex) extendPath(n uint32) {
	if x.depth < len(x.path) {
		x.path[x.depth] = n
	} else {
		x.path = append(x.path, n)
	}
	x.depth++
}

// nextOnPath is the node after the path's last one in its worker's recency list when that node
// holds block, else 0. A request recorded as a whole lies in its worker's list as a run, its
// first block most recent, so this finds the holder of the request's next block without a lookup.
// The path's worker passed the decision's test, which depends only on the worker, so the node
// counts for the depth as well as the first passing holder would.
func (x *blockIndex) nextOnPath(block uint64) uint32 {
	if x.depth == 0 {
		return 0
	}
	p := x.path[x.depth-1]
	if n := x.nodes[p].older; x.nodes[n].block == block && x.nodes[n].worker == x.nodes[p].worker {
		return n
	}
	return 0
}

// matched is the number of leading blocks of the request that w holds.
func (x *blockIndex) matched(w *worker, blocks []uint64) int {
	for i, b := range blocks {
		if _, ok := w.blocks.nodes[b]; !ok {
			return i
		}
	}
	return len(blocks)
}

// record makes w hold the request's blocks, each now more recent than any block w held before,
// and the earlier blocks of the request more recent than the later ones: a worker's index then
// forgets the end of a prefix before its beginning, so it keeps whole prefixes (with chained
// hashes, a block it holds comes with every block before it).
func (x *blockIndex) record(w *worker, blocks []uint64) {
	if w.blocks.sentinel == 0 {
		s := x.alloc()
		if s == 0 {
			return
		}
		x.nodes[s].newer, x.nodes[s].older = s, s
		w.blocks = workerBlocks{sentinel: s, nodes: make(map[uint64]uint32)}
	}
	for i := len(blocks) - 1; i >= 0; {
		last := x.known(w, blocks, i)
		if last == 0 {
			if !x.touch(w, blocks[i], 0) {
				return
			}
			i--
			continue
		}
		// Touching blocks[i], blocks[i-1], ... one by one, while their known nodes follow each
		// other in w's list (newest first), only moves that run, unchanged, to the front: move it
		// at once. The run is contiguous now and has no sentinel, so its nodes are distinct.
		first := last
		for i--; i >= 0; i-- {
			n := x.known(w, blocks, i)
			if n == 0 || x.nodes[n].older != first {
				break
			}
			first = n
		}
		x.moveNewest(w, first, last)
	}
}

// known is w's node of blocks[i] if the latest decision's path has it, else 0.
func (x *blockIndex) known(w *worker, blocks []uint64, i int) uint32 {
	if i >= x.depth {
		return 0
	}
	if n := x.path[i]; x.nodes[n].worker == w && x.nodes[n].block == blocks[i] {
		return n
	}
	return 0
}

// touch makes block the most recent of w's index, adding it (and forgetting w's least recent
// block when w's index is full) if w did not hold it; known is w's node of the block when the
// caller has it (0 to look it up). It reports false, doing nothing, when the block is new and
// every node number is taken.
func (x *blockIndex) touch(w *worker, block uint64, known uint32) bool {
	n, ok := known, known != 0
	if !ok {
		n, ok = w.blocks.nodes[block]
	}
	switch {
	case ok:
		x.unlinkRecency(n)
	case len(w.blocks.nodes) >= x.capacity:
		n = x.nodes[w.blocks.sentinel].newer // the least recent
		x.unlinkRecency(n)
		x.drop(w, n)
		fallthrough
	default:
		if n == 0 {
			if n = x.alloc(); n == 0 {
				return false
			}
		}
		x.nodes[n].block, x.nodes[n].engine, x.nodes[n].worker = block, block, w
		x.linkHolder(n)
		w.blocks.nodes[block] = n
		x.size++
	}
	x.pushNewest(w, n)
	return true
}

// drop takes node n, already out of its recency list, out of the holder list and w's maps.
func (x *blockIndex) drop(w *worker, n uint32) {
	x.unlinkHolder(n)
	delete(w.blocks.nodes, x.nodes[n].block)
	if e := x.nodes[n].engine; w.blocks.engine[e] == n {
		delete(w.blocks.engine, e)
	}
	x.size--
}

// len is the number of (worker, block) pairs indexed; 0 without an index.
func (x *blockIndex) len() int {
	if x == nil {
		return 0
	}
	return x.size
}

// forget drops every block of w's index, when w leaves the membership (nothing without an index).
func (x *blockIndex) forget(w *worker) {
	if x == nil || w.blocks.sentinel == 0 {
		return
	}
	s := w.blocks.sentinel
	for n := x.nodes[s].older; n != s; {
		next := x.nodes[n].older
		x.unlinkHolder(n)
		x.release(n)
		n = next
	}
	x.size -= len(w.blocks.nodes)
	x.release(s)
	w.blocks = workerBlocks{}
}

// alloc returns a free node, or 0 when all 2^32-1 node numbers are taken (more than 4096
// workers with full indexes of the largest blocks_per_worker).
func (x *blockIndex) alloc() uint32 {
	if n := x.free; n != 0 {
		x.free = x.nodes[n].older
		return n
	}
	if len(x.nodes) == math.MaxUint32 {
		return 0
	}
	x.nodes = append(x.nodes, blockNode{})
	return uint32(len(x.nodes) - 1)
}

func (x *blockIndex) release(n uint32) {
	x.nodes[n] = blockNode{older: x.free}
	x.free = n
}

func (x *blockIndex) unlinkRecency(n uint32) {
	newer, older := x.nodes[n].newer, x.nodes[n].older
	x.nodes[newer].older, x.nodes[older].newer = older, newer
}

// moveNewest moves the run of w's list from first to last (first the newer) to its front.
func (x *blockIndex) moveNewest(w *worker, first, last uint32) {
	newer, older := x.nodes[first].newer, x.nodes[last].older
	x.nodes[newer].older, x.nodes[older].newer = older, newer
	s := w.blocks.sentinel
	front := x.nodes[s].older
	x.nodes[first].newer, x.nodes[last].older = s, front
	x.nodes[front].newer, x.nodes[s].older = last, first
}

func (x *blockIndex) pushNewest(w *worker, n uint32) {
	s := w.blocks.sentinel
	first := x.nodes[s].older
	x.nodes[n].newer, x.nodes[n].older = s, first
	x.nodes[first].newer, x.nodes[s].older = n, n
}

func (x *blockIndex) linkHolder(n uint32) {
	block := x.nodes[n].block
	head := x.byBlock[block]
	x.nodes[n].prevHolder, x.nodes[n].nextHolder = 0, head
	if head != 0 {
		x.nodes[head].prevHolder = n
	}
	x.byBlock[block] = n
}

func (x *blockIndex) unlinkHolder(n uint32) {
	node := &x.nodes[n]
	switch {
	case node.prevHolder != 0:
		x.nodes[node.prevHolder].nextHolder = node.nextHolder
	case node.nextHolder != 0:
		x.byBlock[node.block] = node.nextHolder
	default:
		delete(x.byBlock, node.block)
	}
	if node.nextHolder != 0 {
		x.nodes[node.nextHolder].prevHolder = node.prevHolder
	}
}
