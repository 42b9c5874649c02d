package journal

import (
	"bytes"
	"encoding/json"
	"io"

	touba "github.com/touba/touba-trigger"
)

// holdsSecret reports whether any of values contains a resolved secret.
func (j *Journal) holdsSecret(values ...string) bool {
	if j.secrets.Len() == 0 {
		return false
	}
	for _, v := range values {
		if j.secrets.Contains(v) {
			return true
		}
	}
	return false
}

// resultHoldsSecret checks a JSON result both as written and as decoded:
// JSON escapes ("\u0061", "\/") would hide a secret from a plain search of
// the text, yet a later step reading /steps/<id>/output would see it.
func (j *Journal) resultHoldsSecret(raw json.RawMessage) bool {
	if len(raw) == 0 || j.secrets.Len() == 0 {
		return false
	}
	if j.secrets.Contains(string(raw)) {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		} else if err != nil {
			// Not JSON: the raw text was checked above; the caller refuses
			// invalid JSON anyway.
			return false
		}
		switch v := tok.(type) {
		case string:
			if j.secrets.Contains(v) {
				return true
			}
		case json.Number:
			if j.secrets.Contains(v.String()) {
				return true
			}
		}
	}
}

// secretRefused is the error for a value that would store a secret. It
// names the field, never the value.
func secretRefused(what string) error {
	return touba.Errorf(touba.ESecretValueRefused, "%s holds a resolved secret value; not stored", what)
}
