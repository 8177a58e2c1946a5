package kvevents

import (
	"encoding/binary"

	"github.com/bounded-router/bounded-router/core"
)

// Index is what events are applied to: core.Router satisfies it.
type Index interface {
	StoreBlocks(url string, blocks, engineHashes []uint64) error
	RemoveBlocks(url string, engineHashes []uint64) error
	ClearBlocks(url string) error
	ReportedBlock(url string, engineHash uint64) (uint64, bool)
}

// Counts are what applying events did, for the metrics.
type Counts struct {
	Stored, Removed, Cleared uint64 // events applied
	// UnknownParent counts stored events whose parent block the index does not hold (forgotten,
	// or its event missed): their blocks cannot be named by this package's chained hash.
	UnknownParent uint64
	// Adapter counts stored events of LoRA adapters, skipped (their tokens name other KV).
	Adapter uint64
	// UnknownTag counts events of tags this package does not know, skipped.
	UnknownTag uint64
}

// Apply applies a batch of worker's events to the index, in order.
func Apply(x Index, worker string, b Batch, c *Counts) error {
	c.UnknownTag += uint64(b.UnknownEvents)
	for _, e := range b.Events {
		var err error
		switch e.Kind {
		case Stored:
			err = applyStored(x, worker, e, c)
		case Removed:
			err = x.RemoveBlocks(worker, e.BlockHashes)
			c.Removed++
		case Cleared:
			err = x.ClearBlocks(worker)
			c.Cleared++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyStored names the stored blocks by the chained hash of their tokens, continuing the
// parent's (docs/contract.md, "Prefix block hashes"), and stores them.
func applyStored(x Index, worker string, e Event, c *Counts) error {
	if e.Adapter {
		c.Adapter++
		return nil
	}
	var parent uint64
	if e.HasParent {
		var ok bool
		if parent, ok = x.ReportedBlock(worker, e.Parent); !ok {
			c.UnknownParent++
			return nil
		}
	}
	data := make([]byte, 4*len(e.TokenIDs))
	for i, id := range e.TokenIDs {
		binary.LittleEndian.PutUint32(data[4*i:], id)
	}
	blocks := make([]uint64, len(e.BlockHashes))
	if _, err := core.ChainPrefixBlocks(parent, e.HasParent, data, 4*e.BlockSize, blocks); err != nil {
		return err
	}
	c.Stored++
	return x.StoreBlocks(worker, blocks, e.BlockHashes)
}
