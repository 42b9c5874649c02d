package journal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/sqlite/journal"
)

const theSecret = "hunter2-tok/en"

func secretJournal(t *testing.T) (*journal.Journal, string) {
	t.Helper()
	var s secret.Set
	s.Add(theSecret)
	path := journalPath(t)
	return mustOpen(t, path, journal.Options{Secrets: &s}), path
}

// fileHolds reports whether the journal's files on disk hold b.
func fileHolds(t *testing.T, path string, b []byte) bool {
	t.Helper()
	matches, _ := filepath.Glob(path + "*")
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, b) {
			return true
		}
	}
	return false
}

func TestSecretRefusedInIdentity(t *testing.T) {
	ctx := context.Background()
	j, path := secretJournal(t)
	for name, p := range map[string]touba.EffectPrepare{
		"scope":     prep("q-"+theSecret, "q:step", "c1"),
		"effect id": prep("q", "q:"+theSecret, "c1"),
		"call id":   prep("q", "q:step", theSecret),
	} {
		e, err := j.Prepare(ctx, p)
		if got, want := touba.ErrorCode(err), touba.ESecretValueRefused; got != want {
			t.Errorf("%s: code=%s, want %s", name, got, want)
		}
		if e != nil || bytes.Contains([]byte(err.Error()), []byte(theSecret)) {
			t.Errorf("%s: returned %v / message %q", name, e, err)
		}
	}
	if got, err := j.List(ctx, touba.EffectFilter{}); err != nil || len(got) != 0 {
		t.Fatalf("stored %d effects (%v), want none", len(got), err)
	}
	if fileHolds(t, path, []byte(theSecret)) {
		t.Fatal("the secret is in the journal files")
	}
}

func TestSecretRefusedInOutcome(t *testing.T) {
	escaped := `"hunter2-tok\/en"` // the same string, JSON-escaped
	for name, o := range map[string]touba.EffectOutcome{
		"result":         {Result: json.RawMessage(`{"token":"` + theSecret + `"}`)},
		"escaped result": {Result: json.RawMessage(`{"token":` + escaped + `}`)},
		"receipt":        {ReceiptRef: "order:" + theSecret, Result: json.RawMessage(`{}`)},
		"detail":         {Detail: "failed with " + theSecret, Result: json.RawMessage(`{}`)},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			j, path := secretJournal(t)
			bringTo(t, j, touba.EffectDispatched, touba.RetryIdempotencyKey)
			o.Scope, o.EffectID, o.CallID, o.State = "q", "q:step", "c1", touba.EffectApplied
			err := j.Finish(ctx, o)
			if got, want := touba.ErrorCode(err), touba.ESecretValueRefused; got != want {
				t.Fatalf("code=%s (%v), want %s", got, err, want)
			}
			// The outcome is kept (the write happened), its values are not.
			e := mustGet(t, j, "q", "q:step")
			if e.State != touba.EffectApplied || e.Result != nil || e.ReceiptRef != "" || e.ErrorCode != touba.ESecretValueRefused {
				t.Fatalf("stored %+v, want applied, no result or receipt, error SecretValueRefused", e)
			}
			// The identity is released: a new call sees the applied effect.
			if _, err := j.Prepare(ctx, prep("q", "q:step", "c2")); errorIs(err) != "ErrApplied" {
				t.Fatalf("prepare after refused finish: %v, want ErrApplied", err)
			}
			if fileHolds(t, path, []byte(theSecret)) {
				t.Fatal("the secret is in the journal files")
			}
		})
	}
}

func TestSecretRefusedInResolve(t *testing.T) {
	ctx := context.Background()
	j, path := secretJournal(t)
	bringTo(t, j, touba.EffectUnknown, touba.RetryNone)
	for _, r := range []touba.EffectResolution{
		journal.Applied(theSecret, nil),
		journal.Applied("order:1", json.RawMessage(`["`+theSecret+`"]`)),
	} {
		if got, want := touba.ErrorCode(j.Resolve(ctx, "q", "q:step", r)), touba.ESecretValueRefused; got != want {
			t.Fatalf("code=%s, want %s", got, want)
		}
	}
	if got, want := mustGet(t, j, "q", "q:step").State, touba.EffectUnknown; got != want {
		t.Fatalf("state=%s, want %s", got, want)
	}
	if fileHolds(t, path, []byte(theSecret)) {
		t.Fatal("the secret is in the journal files")
	}
}

// FuzzResultHoldsSecret: a secret inside any JSON string of a result is
// found, however the encoder escaped it.
func FuzzResultHoldsSecret(f *testing.F) {
	f.Add("tok", "a", "b")
	f.Add("<&>", "", "")
	f.Add("é/\"\\", "x", "\u2028")
	f.Fuzz(func(t *testing.T, s, prefix, suffix string) {
		// json.Marshal replaces invalid UTF-8, so such a secret cannot be in
		// the result at all.
		if s == "" || !utf8.ValidString(prefix+s+suffix) {
			return
		}
		var set secret.Set
		set.Add(s)
		j := fuzzJournal(t, &set)
		raw, err := json.Marshal(map[string]any{"k": []string{prefix + s + suffix}})
		if err != nil {
			return
		}
		if !j.ResultHoldsSecret(raw) {
			t.Fatalf("secret %q not found in %s", s, raw)
		}
	})
}
