package secret_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/secret"
)

func TestRefDecoding(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"env": "A"}`, true},
		{`{"file": "k.txt"}`, true},
		{`{"credential": "hook"}`, true},
		{`{}`, false},
		{`{"env": "A", "file": "b"}`, false},
		{`{"ENV": "A"}`, false},
		{`{"env": null}`, false},
		{`{"env": 1}`, false},
		{`{"value": "x"}`, false},
		{`{"credential": "../x"}`, false},
		{`"A"`, false},
		{`null`, false},
	} {
		var r secret.Ref
		err := json.Unmarshal([]byte(tc.in), &r)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err=%v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k.txt"), []byte("from-file\n"), 0o600)
	creds := t.TempDir()
	os.WriteFile(filepath.Join(creds, "hook"), []byte("from-cred"), 0o600)
	env := func(k string) (string, bool) {
		v, ok := map[string]string{"A": "from-env", "EMPTY": "", "CREDENTIALS_DIRECTORY": creds}[k]
		return v, ok
	}
	for _, tc := range []struct {
		ref  secret.Ref
		want string
	}{
		{secret.Ref{Env: "A"}, "from-env"},
		{secret.Ref{File: "k.txt"}, "from-file"},
		{secret.Ref{Credential: "hook"}, "from-cred"},
	} {
		got, err := tc.ref.Resolve(env, dir)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.ref, got, err, tc.want)
		}
	}
	for _, ref := range []secret.Ref{{Env: "MISSING"}, {Env: "EMPTY"}, {File: "nope"}, {Credential: "nope"}} {
		if _, err := ref.Resolve(env, dir); err == nil {
			t.Errorf("%s resolved", ref)
		}
	}
}

func TestContainsJSON(t *testing.T) {
	var s secret.Set
	if s.ContainsJSON([]byte(`{"a":"hunter2"}`)) {
		t.Fatal("empty set found a secret")
	}
	s.Add("hunter2")
	for doc, want := range map[string]bool{
		`{"a":"hunter2"}`:                     true,
		`{"a":"\u0068unter2"}`:                true,
		`["x", {"b": "pre-hunter2-post"}]`:    true,
		`{"hunter2": 1}`:                      true,
		`{"a":"hunter"}`:                      false,
		`not json but hunter2`:                true,
		strings.Repeat(`{"a":`, 3) + `"x"}}}`: false,
	} {
		if got := s.ContainsJSON([]byte(doc)); got != want {
			t.Errorf("ContainsJSON(%s)=%v, want %v", doc, got, want)
		}
	}
}
