package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	touba "github.com/touba/touba-trigger"
)

// ConfigError is one refusal of a manifest; the program loader refuses
// with the same type.
type ConfigError = touba.ConfigError

// maxErrors bounds how many refusals one load reports: past a few dozen the
// list stops helping, and a hostile file must not produce megabytes of text.
const maxErrors = 50

// problems collects the refusals of one load, in document order.
type problems struct {
	file string
	errs []*ConfigError
}

// add records a refusal at path.
func (p *problems) add(path, format string, args ...any) {
	if len(p.errs) < maxErrors {
		p.errs = append(p.errs, &ConfigError{File: p.file, Path: path, Rule: fmt.Sprintf(format, args...)})
	}
}

// err returns nil, the single refusal, or all of them joined (one a line);
// errors.As finds the first *ConfigError either way.
func (p *problems) err() error {
	switch len(p.errs) {
	case 0:
		return nil
	case 1:
		return p.errs[0]
	}
	all := make([]error, len(p.errs))
	for i, e := range p.errs {
		all[i] = e
	}
	return errors.Join(all...)
}

// identKey is a key that reads well after a dot in a path.
var identKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// child extends a JSON path with an object key: `.key` for identifiers,
// `["key"]` (JSON-quoted) for anything else, such as tool refs.
func child(path, key string) string {
	if identKey.MatchString(key) {
		return path + "." + key
	}
	return path + "[" + quote(key) + "]"
}

// index extends a JSON path with an array position.
func index(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}

// quote renders s as a JSON string without HTML escaping, so a key in a
// message reads as the user wrote it.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}
