package strictjson

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
)

// identKey is a key that reads well after a dot in a path.
var identKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Child extends a path with an object key: `.key` for identifiers,
// `["key"]` (JSON-quoted) for anything else, such as tool refs or `$ref`.
func Child(path, key string) string {
	if identKey.MatchString(key) {
		return path + "." + key
	}
	return path + "[" + Quote(key) + "]"
}

// Index extends a path with an array position.
func Index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// Quote renders s as a JSON string without HTML escaping, so a key or value
// in a message reads as the user wrote it.
func Quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}
