package gateway

import (
	"encoding/json"

	"github.com/bounded-router/bounded-router/core"
)

// The prompt of an OpenAI-style request body as prefix block hashes, for the prefix_blocks
// "text" option (docs/contract.md, "HTTP proxies"): the text the engine caches, in its order,
// hashed as core.HashPrefixBlocks hashes, as the Python proxies do. The body is read in place
// (jsonScanner) and its text hashed as it is decoded, so the memory a request needs for it is
// its blocks, not a copy of its JSON or its text.

// bodyPrefixBlocks is the prefix blocks of a body's prompt text, of its first maxBytes bytes and
// at most MaxPrefixBlocks blocks of blockLen bytes, or nil when the body has no prompt.
func bodyPrefixBlocks(body []byte, blockLen, maxBytes int) []uint64 {
	limit := min(maxBytes/blockLen, core.MaxPrefixBlocks)
	// The text is about as long as the body (escapes make it shorter); the blocks grow past
	// that only for parts re-encoded longer.
	h := core.NewPrefixHasher(blockLen, limit, make([]uint64, 0, min(limit, len(body)/blockLen)))
	if !writePrompt(body, h) || len(h.Blocks()) == 0 {
		return nil
	}
	return h.Blocks()
}

// requestPrefixBlocks is the prefix blocks the prefix_blocks option reads from a request body:
// nil when it is off or the body has none.
func requestPrefixBlocks(o *Options, body []byte) []uint64 {
	switch o.PrefixBlocks {
	case "text":
		return bodyPrefixBlocks(body, o.PrefixBlockBytes, o.PrefixMaxBytes)
	case "tokens":
		return bodyTokenBlocks(body, o.PrefixBlockSize, o.PrefixMaxBytes)
	}
	return nil
}

// topLevelFields checks that body is one JSON object, valid as a whole, and returns where the
// values of its last first and second keys start (-1 when absent), as encoding/json reads a
// repeated key.
func topLevelFields(body []byte, first, second string) (int, int, bool) {
	at, next := -1, -1
	s := jsonScanner{data: body}
	valid := s.object(func(s *jsonScanner, key []byte) bool {
		switch string(key) {
		case first:
			at = s.pos
		case second:
			next = s.pos
		}
		return s.value()
	})
	return at, next, valid && s.peek() == 0 && s.pos == len(body)
}

// textSink takes a prompt's text in pieces until it is full (a core.PrefixHasher).
type textSink interface {
	Write(p []byte) (int, error)
	Full() bool
}

// promptWriter hands the text of a prompt on to a sink and tells whether there was any.
type promptWriter struct {
	out     textSink
	written int
}

func (p *promptWriter) write(b []byte) {
	p.written += len(b)
	p.out.Write(b)
}

// done says that the sink takes no more and the prompt is known to be there: the rest of the
// body need not be read.
func (p *promptWriter) done() bool { return p.out.Full() && p.written > 0 }

// writePrompt writes a JSON body's prompt text to out and reports whether it has one: each
// message's role and content with a newline after each, for "messages" (an array); else a
// "prompt" string, or an array of strings (null counting as empty) joined by newlines. The body
// must be a JSON object, valid as a whole; of a key given twice, the last counts.
func writePrompt(body []byte, out textSink) bool {
	messages, prompt, valid := topLevelFields(body, "messages", "prompt")
	if !valid {
		return false
	}
	p := &promptWriter{out: out}
	if messages >= 0 && body[messages] == '[' {
		(&jsonScanner{data: body, pos: messages}).array(func(s *jsonScanner) bool {
			return !p.done() && p.message(s) // done: the rest is not needed
		})
		return p.written > 0
	}
	if prompt < 0 {
		return false
	}
	return p.prompt(&jsonScanner{data: body, pos: prompt})
}

// prompt writes a "prompt" value: a string, or an array of strings and nulls.
func (p *promptWriter) prompt(s *jsonScanner) bool {
	if s.peek() == '"' {
		s.text(p.write)
		return p.written > 0
	}
	start, strings := s.pos, 0
	onlyStrings := s.array(func(s *jsonScanner) bool {
		strings++
		return (s.peek() == '"' || s.peek() == 'n') && s.value()
	})
	if !onlyStrings || strings == 0 {
		return false
	}
	s.pos, strings = start, 0
	s.array(func(s *jsonScanner) bool {
		if strings++; strings > 1 {
			p.write(newline)
		}
		if s.peek() == 'n' {
			return s.value()
		}
		return s.text(p.write)
	})
	return true
}

var newline = []byte{'\n'}

// message writes a message's role (a string, else nothing), a newline, its content and a
// newline; an element that is not an object writes nothing. Keys match "role" and "content"
// regardless of case, as encoding/json matches struct fields.
func (p *promptWriter) message(s *jsonScanner) bool {
	if s.peek() != '{' {
		return s.value()
	}
	role, content := -1, -1
	if !s.object(func(s *jsonScanner, key []byte) bool {
		switch {
		case equalFoldASCII(key, "role"):
			role = s.pos
		case equalFoldASCII(key, "content"):
			content = s.pos
		}
		return s.value()
	}) {
		return false
	}
	if role >= 0 && s.data[role] == '"' {
		(&jsonScanner{data: s.data, pos: role}).text(p.write)
	}
	p.write(newline)
	if content >= 0 {
		p.content(&jsonScanner{data: s.data, pos: content})
	}
	p.write(newline)
	return true
}

// content writes a string content, or the parts of an array: a text part's text, any other
// part as its compact JSON with sorted keys (encoding/json's).
func (p *promptWriter) content(s *jsonScanner) {
	switch s.peek() {
	case '"':
		s.text(p.write)
	case '[':
		s.array(func(s *jsonScanner) bool {
			if p.done() {
				return false // the rest is not needed
			}
			start := s.pos
			if text := textPart(s); text >= 0 {
				(&jsonScanner{data: s.data, pos: text}).text(p.write)
				return true
			}
			s.pos = start
			if !s.value() {
				return false
			}
			var value any
			if json.Unmarshal(s.data[start:s.pos], &value) == nil {
				compact, _ := json.Marshal(value) // maps marshal with sorted keys
				p.write(compact)
			}
			return true
		})
	}
}

// textPart reads a content part and returns where its text string starts when it is a text
// part: an object whose last "type" is "text" (a null type changes nothing; any other
// non-string type makes it no text part) and whose last "text" is a string; else -1.
func textPart(s *jsonScanner) int {
	if s.peek() != '{' {
		return -1
	}
	isText, typeOK, text := false, true, -1
	ok := s.object(func(s *jsonScanner, key []byte) bool {
		switch {
		case equalFoldASCII(key, "type"):
			switch s.peek() {
			case '"':
				var name keyName
				if !s.text(name.add) {
					return false
				}
				isText = string(name.bytes()) == "text"
				return true
			case 'n':
			default:
				typeOK = false
			}
		case equalFoldASCII(key, "text"):
			text = s.pos
		}
		return s.value()
	})
	if !ok || !isText || !typeOK || text < 0 || s.data[text] != '"' {
		return -1
	}
	return text
}

// equalFoldASCII reports whether key is name (lower case ASCII) regardless of ASCII case.
func equalFoldASCII(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}
