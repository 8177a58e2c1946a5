package gateway

import (
	"encoding/json"
	"strings"

	"github.com/bounded-router/bounded-router/core"
)

// The prompt of an OpenAI-style request body as prefix block hashes, for the prefix_blocks
// "text" option (docs/contract.md, "HTTP proxies"): the text the engine caches, in its order,
// hashed with core.HashPrefixBlocks as the Python proxies do.

// bodyPrefixBlocks is the prefix blocks of a body's prompt text (its first MaxPrefixBlocks
// blocks of blockLen bytes), or nil when the body has no prompt.
func bodyPrefixBlocks(body []byte, blockLen int) []uint64 {
	text, ok := promptText(body)
	if !ok {
		return nil
	}
	data := []byte(text)[:min(len(text), core.MaxPrefixBlocks*blockLen)]
	blocks := make([]uint64, len(data)/blockLen)
	n, err := core.HashPrefixBlocks(data, blockLen, blocks)
	if err != nil || n == 0 { // blockLen is validated and data cut to the limit: no error
		return nil
	}
	return blocks[:n]
}

// promptText is the prompt text of a JSON body: each message's role and content with a newline
// after each, for "messages"; else a "prompt" string, or a list of strings joined by newlines.
func promptText(body []byte) (string, bool) {
	var document map[string]json.RawMessage
	if json.Unmarshal(body, &document) != nil {
		return "", false
	}
	var messages []json.RawMessage
	if json.Unmarshal(document["messages"], &messages) == nil && messages != nil {
		var b strings.Builder
		for _, m := range messages {
			writeMessage(&b, m)
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

// writeMessage writes a message's role, a newline, its content and a newline; an element that
// is not an object writes nothing.
func writeMessage(b *strings.Builder, raw json.RawMessage) {
	var message struct {
		Role    json.RawMessage `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &message) != nil || !isObject(raw) {
		return
	}
	var role string
	_ = json.Unmarshal(message.Role, &role) // not a string: no role
	b.WriteString(role)
	b.WriteByte('\n')
	writeContent(b, message.Content)
	b.WriteByte('\n')
}

// writeContent writes a string content, or the parts of a list: a text part's text, any other
// part as its compact JSON.
func writeContent(b *strings.Builder, raw json.RawMessage) {
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
		if json.Unmarshal(part, &p) == nil && isObject(part) && p.Type == "text" && json.Unmarshal(p.Text, &text) == nil {
			b.WriteString(text)
			continue
		}
		var value any
		if json.Unmarshal(part, &value) == nil {
			compact, _ := json.Marshal(value) // maps marshal with sorted keys
			b.Write(compact)
		}
	}
}

func isObject(raw json.RawMessage) bool {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	return strings.HasPrefix(s, "{")
}
