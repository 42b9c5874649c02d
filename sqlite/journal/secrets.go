package journal

import (
	"encoding/json"

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
// a later step reading /steps/<id>/output would see an escaped secret.
func (j *Journal) resultHoldsSecret(raw json.RawMessage) bool { return j.secrets.ContainsJSON(raw) }

// secretRefused is the error for a value that would store a secret. It
// names the field, never the value.
func secretRefused(what string) error {
	return touba.Errorf(touba.ESecretValueRefused, "%s holds a resolved secret value; not stored", what)
}
