package core

// MaxPrefixBlocks is the most prefix blocks one request may carry: a million-token prompt in
// blocks of 16 tokens, the smallest block size serving engines use.
const MaxPrefixBlocks = 1 << 16

// CheckPrefixBlocks returns an error naming the field when a request carries more prefix blocks
// than the router accepts.
func CheckPrefixBlocks(n int) error { return CheckBlockCount("prefix_blocks", uint64(n)) }

// CheckBlockCount returns an error naming the argument name when a list of block hashes (a
// request's, or an engine's report) holds more than MaxPrefixBlocks.
func CheckBlockCount(name string, n uint64) error {
	if n > MaxPrefixBlocks {
		return invalid("%s may hold at most %d blocks, got %d", name, MaxPrefixBlocks, n)
	}
	return nil
}
