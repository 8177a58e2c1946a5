package core

// MaxPrefixBlocks is the most prefix blocks one request may carry: a million-token prompt in
// blocks of 16 tokens, the smallest block size serving engines use.
const MaxPrefixBlocks = 1 << 16

// CheckPrefixBlocks returns an error naming the field when a request carries more prefix blocks
// than the router accepts.
func CheckPrefixBlocks(n int) error {
	if n > MaxPrefixBlocks {
		return invalid("prefix_blocks may hold at most %d blocks, got %d", MaxPrefixBlocks, n)
	}
	return nil
}
