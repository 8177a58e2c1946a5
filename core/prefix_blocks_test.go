package core

import (
	"strings"
	"testing"
)

func TestCheckPrefixBlocksAcceptsUpToTheLimitAndNamesTheFieldBeyondIt(t *testing.T) {
	if err := CheckPrefixBlocks(MaxPrefixBlocks); err != nil {
		t.Fatalf("MaxPrefixBlocks blocks: %v", err)
	}
	err := CheckPrefixBlocks(MaxPrefixBlocks + 1)
	if err == nil || !strings.Contains(err.Error(), "prefix_blocks") {
		t.Fatalf("one block too many: got %v, want an error naming prefix_blocks", err)
	}
}
