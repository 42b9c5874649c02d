// Package secret holds secret references ({"env"}, {"file"}, {"credential"})
// as the program and the manifest write them, and resolves them to values.
// A resolved value is never logged or persisted; Set lets callers check that
// a string about to be stored does not contain one.
package secret

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Ref is one secret reference: exactly one of its fields is set.
type Ref struct {
	Env        string `json:"env,omitempty"`
	File       string `json:"file,omitempty"`
	Credential string `json:"credential,omitempty"`
}

// UnmarshalJSON refuses unknown fields and references naming zero or
// several sources.
func (r *Ref) UnmarshalJSON(b []byte) error {
	// A map, not a struct: encoding/json matches struct fields without
	// regard to case, and {"ENV": ...} must not pass for {"env": ...}.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return errors.New("secret reference must be an object")
	}
	var p Ref
	for k, v := range m {
		var dst *string
		switch k {
		case "env":
			dst = &p.Env
		case "file":
			dst = &p.File
		case "credential":
			dst = &p.Credential
		default:
			return fmt.Errorf("secret reference: unknown field %q", k)
		}
		if err := json.Unmarshal(v, dst); err != nil || isNullJSON(v) {
			return fmt.Errorf("secret reference: %q must be a string", k)
		}
	}
	*r = p
	return r.Validate()
}

func isNullJSON(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// Validate checks that exactly one source is named.
func (r Ref) Validate() error {
	n := 0
	for _, s := range []string{r.Env, r.File, r.Credential} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New(`secret reference must name exactly one of "env", "file", "credential"`)
	}
	if r.Credential != "" && strings.ContainsAny(r.Credential, "/\\") {
		return errors.New("secret reference: credential name must not contain a path separator")
	}
	return nil
}

// String describes the reference without its value, for messages.
func (r Ref) String() string {
	switch {
	case r.Env != "":
		return "env:" + r.Env
	case r.File != "":
		return "file:" + r.File
	default:
		return "credential:" + r.Credential
	}
}

// Env is the environment a resolver reads; tests pass their own.
type Env func(name string) (string, bool)

// Resolve reads the value of r. Relative file paths are taken from baseDir.
// A value that is empty after trimming a final newline is an error: an empty
// HMAC key would verify anything signed with it.
func (r Ref) Resolve(env Env, baseDir string) (string, error) {
	if env == nil {
		env = os.LookupEnv
	}
	var v string
	switch {
	case r.Env != "":
		s, ok := env(r.Env)
		if !ok {
			return "", fmt.Errorf("secret %s: variable not set", r)
		}
		v = s
	case r.File != "":
		p := r.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("secret %s: %w", r, err)
		}
		v = string(b)
	case r.Credential != "":
		dir, ok := env("CREDENTIALS_DIRECTORY")
		if !ok || dir == "" {
			return "", fmt.Errorf("secret %s: CREDENTIALS_DIRECTORY is not set", r)
		}
		b, err := os.ReadFile(filepath.Join(dir, r.Credential))
		if err != nil {
			return "", fmt.Errorf("secret %s: %w", r, err)
		}
		v = string(b)
	default:
		return "", errors.New("secret reference names no source")
	}
	v = strings.TrimRight(v, "\r\n")
	if v == "" {
		return "", fmt.Errorf("secret %s: value is empty", r)
	}
	return v, nil
}

// Set is the set of resolved secret values of a configuration, used to
// refuse storing anything that holds one (SPEC §5, SecretValueRefused).
// It only grows (a reload adds the new configuration's values; an old value
// may still sit in files written before) and is safe for concurrent use.
type Set struct {
	mu     sync.RWMutex
	values []string
}

// Add records a resolved value. Values shorter than 4 bytes are kept too:
// a short secret is still a secret.
func (s *Set) Add(v string) {
	if v == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, old := range s.values {
		if old == v {
			return
		}
	}
	s.values = append(s.values, v)
}

// Merge adds every value of other.
func (s *Set) Merge(other *Set) {
	if other == nil || other == s {
		return
	}
	other.mu.RLock()
	vals := append([]string(nil), other.values...)
	other.mu.RUnlock()
	for _, v := range vals {
		s.Add(v)
	}
}

// Contains reports whether text holds any recorded value.
func (s *Set) Contains(text string) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.values {
		if strings.Contains(text, v) {
			return true
		}
	}
	return false
}

// Len returns how many values are recorded.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.values)
}

// ContainsJSON reports whether the JSON document doc holds a recorded value,
// in its text or in any string or number once decoded: a JSON escape
// ("\u0061", "\/") hides a value from a plain search of the text, yet
// whoever decodes the document sees it. A document that is not JSON is
// searched as text only.
func (s *Set) ContainsJSON(doc []byte) bool {
	if s.Len() == 0 || len(doc) == 0 {
		return false
	}
	if s.Contains(string(doc)) {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF, or not JSON
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
