package entrysearch_test

import (
	"encoding/json"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/entrysearch"
)

// A body matches when it is JSON holding the value at the pointer, numbers
// compared by their text; a bad pointer is BadRequest; no pointer and no
// value match every body.
func TestBodyMatcher(t *testing.T) {
	m, err := entrysearch.NewBodyMatcher("/customer/id", json.RawMessage(`"cus_1"`))
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]bool{
		`{"customer": {"id": "cus_1"}}`: true,
		`{"customer": {"id": "cus_2"}}`: false,
		`{"customer": "cus_1"}`:         false,
		`not json`:                      false,
	} {
		if got := m.Match([]byte(body)); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
	n, _ := entrysearch.NewBodyMatcher("/n", json.RawMessage(`10`))
	if !n.Match([]byte(`{"n": 10}`)) || n.Match([]byte(`{"n": 10.0}`)) {
		t.Error("numbers compare by their text: 10 matches 10, not 10.0")
	}
	if _, err := entrysearch.NewBodyMatcher("no-slash", json.RawMessage(`1`)); touba.ErrorCode(err) != touba.EBadRequest {
		t.Errorf("a bad pointer: %v, want %s", err, touba.EBadRequest)
	}
	if all, err := entrysearch.NewBodyMatcher("", nil); err != nil || !all.Match([]byte("anything")) {
		t.Errorf("no pointer and no value: %v %v, want every body", all, err)
	}
}
