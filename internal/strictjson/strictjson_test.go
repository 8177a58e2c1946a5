package strictjson

import "testing"

type form struct {
	Count  int      `json:"count"`
	Small  int8     `json:"small"`
	Seed   uint64   `json:"seed"`
	Skew   float64  `json:"skew"`
	Name   string   `json:"name"`
	On     bool     `json:"on"`
	Names  []string `json:"names"`
	Nested struct {
		Threshold int `json:"threshold"`
	} `json:"nested"`
}

// Regression (found by a review): a value of the wrong kind or out of range was reported in
// encoding/json's words, naming Go's structs and types ("cannot unmarshal number
// 99999999999999999999 into Go struct field Options.max_body_size of type int64").
func TestAValueOfTheWrongKindIsNamedByItsFieldAndTheRuleItBreaks(t *testing.T) {
	cases := []struct{ text, want string }{
		{`{"count": 99999999999999999999}`, "count must be an integer of at most 9223372036854775807, got 99999999999999999999"},
		{`{"count": -99999999999999999999}`, "count must be an integer of at least -9223372036854775808, got -99999999999999999999"},
		{`{"count": 1.5}`, "count must be an integer, got 1.5"},
		{`{"count": 1e3}`, "count must be an integer, got 1e3"},
		{`{"count": "5"}`, "count must be an integer, got a string"},
		{`{"small": 300}`, "small must be an integer of at most 127, got 300"},
		{`{"seed": -1}`, "seed must be an integer of at least 0, got -1"},
		{`{"seed": 18446744073709551616}`, "seed must be an integer of at most 18446744073709551615, got 18446744073709551616"},
		{`{"skew": 1e400}`, "skew must be a finite number, got 1e400"},
		{`{"skew": true}`, "skew must be a number, got a boolean"},
		{`{"name": 3}`, "name must be a string, got a number"},
		{`{"on": "yes"}`, "on must be true or false, got a string"},
		{`{"names": {}}`, "names must be a list, got an object"},
		{`{"nested": []}`, "nested must be an object, got a list"},
		{`[]`, "the JSON text must be an object, got a list"},
		{`{"nested": {"threshold": 99999999999999999999}}`, "nested.threshold must be an integer of at most 9223372036854775807, got 99999999999999999999"},
	}
	for _, c := range cases {
		var f form
		err := Decode([]byte(c.text), &f, FieldsOf(form{}))
		if err == nil || err.Error() != c.want {
			t.Errorf("Decode(%s) = %v, want %q", c.text, err, c.want)
		}
	}
}
