package dispatcher

import "github.com/touba/touba-trigger/internal/secret"

// holdsSecret reports whether the JSON document doc holds a secret value
// of s, decoded or not: the next step reading /steps/<id>/output would see
// an escaped one (SPEC §5, SecretValueRefused).
func holdsSecret(s *secret.Set, doc []byte) bool { return s.ContainsJSON(doc) }
