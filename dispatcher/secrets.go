package dispatcher

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/touba/touba-trigger/internal/secret"
)

// holdsSecret reports whether the JSON document doc holds a secret value
// of s, in its text or in any string or number once decoded: a JSON escape
// ("\u0061") hides a value from a plain search of the text, yet the next
// step reading /steps/<id>/output sees it (SPEC §5, SecretValueRefused).
func holdsSecret(s *secret.Set, doc []byte) bool {
	if s.Len() == 0 {
		return false
	}
	if s.Contains(string(doc)) {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		} else if err != nil {
			// Not JSON: the text was searched above, and setOutput refuses
			// an output that is not JSON.
			return false
		}
		switch v := tok.(type) {
		case string:
			if s.Contains(v) {
				return true
			}
		case json.Number:
			if s.Contains(v.String()) {
				return true
			}
		}
	}
}
