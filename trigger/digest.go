package trigger

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// definition sets t's Definition and Digest (version pinning, SPEC §2.3):
// the trigger's object as written, in the canonical JSON of effect
// fingerprints (keys sorted, no insignificant space, numbers as written),
// so re-indenting the program or reordering a trigger's keys keeps its
// digest, and any change of a value, a step or a field makes a new one.
// The dispatch field is left out: a new weight changes when runs start,
// not what they do, and must not park the entries accepted before it.
func (w walker) definition(path string, raw *strictjson.Node, t *Trigger) error {
	def, err := handler.Canonical(runFields(raw))
	if err != nil {
		// The strict decoder refused what Canonical refuses but invalid
		// UTF-8 in a string.
		return w.Fail(path, "must be valid UTF-8 JSON: %v", err)
	}
	t.Definition = def
	t.Digest = Digest(def)
	return nil
}

// Digest is the lowercase hex SHA-256 of a trigger's Definition.
func Digest(definition []byte) string {
	sum := sha256.Sum256(definition)
	return hex.EncodeToString(sum[:])
}

// DigestPrefix is how `check`, `queue show` and logs print a digest: its
// first 12 hex characters, enough to tell versions of one trigger apart.
func DigestPrefix(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}
