package testkit

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// Entries reads every entry of the queue file at path, oldest first, of a
// stopped daemon (opening the file migrates it, a write).
func Entries(tb testing.TB, path string) []*touba.Delivery {
	tb.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, path, queue.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer q.Close()
	all, err := q.List(ctx, touba.EntryFilter{Limit: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	return all
}

// Effects reads every effect of the journal file at path and each one's
// audit trail (by effect id), of a stopped daemon (the journal's lock keeps
// other writers off a running one's file).
func Effects(tb testing.TB, path string) ([]touba.Effect, map[string][]touba.EffectEvent) {
	tb.Helper()
	ctx := context.Background()
	j, err := journal.Open(ctx, path, journal.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer j.Close()
	all, err := j.List(ctx, touba.EffectFilter{})
	if err != nil {
		tb.Fatal(err)
	}
	events := map[string][]touba.EffectEvent{}
	for _, e := range all {
		if events[e.EffectID], err = j.Events(ctx, e.Scope, e.EffectID); err != nil {
			tb.Fatal(err)
		}
	}
	return all, events
}

// EntryError reads the error code and message of entry id in the queue
// file at path, of a stopped daemon.
func EntryError(tb testing.TB, path, id string) (code, message string) {
	tb.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, path, queue.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer q.Close()
	d, err := q.Get(ctx, id)
	if err != nil || d == nil {
		tb.Fatalf("entry %s: %v", id, err)
	}
	x, err := q.Detail(ctx, id)
	if err != nil {
		tb.Fatal(err)
	}
	return d.ErrorCode, x.ErrorMessage
}
