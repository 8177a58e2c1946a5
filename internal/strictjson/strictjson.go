// Package strictjson decodes a JSON object in exactly its documented form, for every JSON text
// the library's bindings pass (the core's configuration, the feeds' and the gateway's options;
// docs/contract.md, "Validation"). encoding/json alone replaces invalid UTF-8 and lone surrogate
// escapes with U+FFFD (silently changing a URL), takes a key for the field it matches without
// regard to case, and takes null for an empty list.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Fields are the keys of a form, spelled exactly, and which of them hold lists.
type Fields struct{ names, lists map[string]bool }

// Names is the Fields of these keys, none of them checked as a list (a caller that reads raw
// values checks those itself).
func Names(names ...string) Fields {
	f := Fields{names: map[string]bool{}}
	for _, n := range names {
		f.names[n] = true
	}
	return f
}

// FieldsOf reads the json tags of the struct forms given and of the structs their fields hold.
func FieldsOf(forms ...any) Fields {
	f := Fields{names: map[string]bool{}, lists: map[string]bool{}}
	for _, form := range forms {
		f.add(reflect.TypeOf(form))
	}
	return f
}

func (f Fields) add(t reflect.Type) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		field := t.Field(i)
		name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		f.names[name] = true
		if field.Type.Kind() == reflect.Slice {
			f.lists[name] = true
		}
		f.add(field.Type)
	}
}

// Decode decodes data, one JSON object and nothing after it, into into, refusing invalid UTF-8,
// lone surrogates, keys that are no field (also in another case) and null for a list.
func Decode(data []byte, into any, fields Fields) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("the JSON text is not valid UTF-8")
	}
	if err := checkSurrogates(data); err != nil {
		return err
	}
	if err := checkFields(data, fields); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		if wrong, ok := err.(*json.UnmarshalTypeError); ok {
			return typeError(wrong)
		}
		return err
	}
	// More() would miss a stray '}' or ']' after the object; only the end of input is clean.
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON object")
	}
	return nil
}

// checkFields refuses object keys that differ from a field name only in case, which
// encoding/json would take for that field (keys it does not know at all it reports itself), and
// null for a field that holds a list.
func checkFields(data []byte, fields Fields) error {
	type frame struct{ object, wantKey bool }
	var stack []frame
	key := "" // the key whose value is the next token
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		token, err := dec.Token()
		if err != nil {
			return nil // malformed JSON is reported by the decoder proper
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].wantKey {
			if name, ok := token.(string); ok {
				if !fields.names[name] && fields.names[strings.ToLower(name)] {
					return fmt.Errorf("unknown field %q (field names are case-sensitive: %q)", name, strings.ToLower(name))
				}
				stack[top].wantKey, key = false, name
				continue
			}
		}
		if token == nil && fields.lists[key] {
			return fmt.Errorf("%s must be a list, not null", key)
		}
		key = ""
		switch token {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
		}
		// A value ended: the enclosing object expects its next key.
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
}

// checkSurrogates refuses \u escapes of UTF-16 surrogates that do not form a pair.
func checkSurrogates(data []byte) error {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(data):
			if data[i+1] != 'u' {
				i++ // a one-character escape, such as \\ or \"
				continue
			}
			r, ok := hex4(data[i+2:])
			switch {
			case !ok:
				return nil // malformed JSON is reported by the decoder proper
			case 0xD800 <= r && r < 0xDC00:
				if low, ok := hex4(data[min(i+8, len(data)):]); ok && data[i+6] == '\\' && data[i+7] == 'u' && 0xDC00 <= low && low < 0xE000 {
					i += 11
					continue
				}
				return fmt.Errorf("\\u%04X is a lone UTF-16 surrogate, not a character", r)
			case 0xDC00 <= r && r < 0xE000:
				return fmt.Errorf("\\u%04X is a lone UTF-16 surrogate, not a character", r)
			}
			i += 5
		}
	}
	return nil
}

// hex4 decodes the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(n), err == nil
}

// typeError names the field of a value of the wrong kind, or of a number out of its field's
// range, and the rule it breaks, in the form's words where encoding/json names Go's structs and
// types (docs/contract.md, "Validation").
func typeError(e *json.UnmarshalTypeError) error {
	number, isNumber := strings.CutPrefix(e.Value, "number ")
	got := number
	if !isNumber {
		got = map[string]string{"string": "a string", "number": "a number", "bool": "a boolean", "array": "a list", "object": "an object"}[e.Value]
	}
	field := e.Field
	if field == "" {
		field = "the JSON text"
	}
	return fmt.Errorf("%s must be %s, got %s", field, wanted(e.Type, number, isNumber), got)
}

// wanted is the rule a field of type t states, for the number literal given if isNumber.
func wanted(t reflect.Type, number string, isNumber bool) string {
	whole := isNumber && !strings.ContainsAny(number, ".eE")
	negative := strings.HasPrefix(number, "-")
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		switch {
		case !whole:
			return "an integer"
		case negative:
			return fmt.Sprintf("an integer of at least %d", int64(-1)<<(t.Bits()-1))
		}
		return fmt.Sprintf("an integer of at most %d", int64(math.MaxInt64>>(64-t.Bits())))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch {
		case !whole:
			return "an integer"
		case negative:
			return "an integer of at least 0"
		}
		return fmt.Sprintf("an integer of at most %d", uint64(math.MaxUint64>>(64-t.Bits())))
	case reflect.Float32, reflect.Float64:
		if isNumber {
			return "a finite number"
		}
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}
