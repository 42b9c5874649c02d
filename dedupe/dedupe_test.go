package dedupe_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
)

func TestValidateEventID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"evt_1", true},
		{"a", true},
		{" ~!", true},
		{strings.Repeat("x", 200), true},
		{strings.Repeat("x", 201), false},
		{"", false},
		{"tab\there", false},
		{"nl\n", false},
		{"del\x7f", false},
		{"é", false},
		{"\x00", false},
	} {
		err := dedupe.ValidateEventID(tc.id)
		if got := err == nil; got != tc.ok {
			t.Errorf("ValidateEventID(%q) ok=%v, want %v (err %v)", tc.id, got, tc.ok, err)
		}
		if err != nil && touba.ErrorCode(err) != touba.ETriggerEventIDInvalid {
			t.Errorf("code=%s", touba.ErrorCode(err))
		}
	}
}

func TestDigest(t *testing.T) {
	// SHA-256 of the empty string and of "abc" (FIPS 180-2 examples).
	if got, want := dedupe.Digest(nil), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"; got != want {
		t.Fatalf("Digest(nil)=%s, want %s", got, want)
	}
	if got, want := dedupe.Digest([]byte("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("Digest(abc)=%s, want %s", got, want)
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		digest, status, newDigest string
		want                      dedupe.Decision
	}{
		{"a", touba.StatusPending, "a", dedupe.Duplicate},
		{"a", touba.StatusPending, "b", dedupe.Conflict},
		{"a", touba.StatusRunning, "a", dedupe.Replay},
		{"a", touba.StatusDone, "a", dedupe.Replay},
		{"a", touba.StatusFailed, "a", dedupe.Replay},
		{"a", touba.StatusParked, "a", dedupe.Replay},
		{"a", touba.StatusDone, "b", dedupe.Conflict},
	} {
		if got := dedupe.Decide(tc.digest, tc.status, tc.newDigest); got != tc.want {
			t.Errorf("Decide(%s,%s,%s)=%v, want %v", tc.digest, tc.status, tc.newDigest, got, tc.want)
		}
	}
}

func FuzzValidateEventID(f *testing.F) {
	for _, s := range []string{"", "evt_1", "\x00", strings.Repeat("y", 201), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := dedupe.ValidateEventID(id)
		printable := id != "" && len(id) <= 200 && utf8.ValidString(id)
		for _, r := range id {
			if r < 0x20 || r > 0x7e {
				printable = false
			}
		}
		if (err == nil) != printable {
			t.Fatalf("ValidateEventID(%q)=%v, printable=%v", id, err, printable)
		}
	})
}

// One mapping from an enqueue to intake's answer, for intake and for an
// operator's delivery replay alike.
func TestAnswered(t *testing.T) {
	for _, tc := range []struct {
		res  touba.EnqueueResult
		want dedupe.Answer
	}{
		{touba.EnqueueResult{Created: true, Digest: "d", Status: touba.StatusPending}, dedupe.Answer{Status: touba.IntakeEnqueued}},
		{touba.EnqueueResult{Digest: "d", Status: touba.StatusPending}, dedupe.Answer{Status: touba.IntakeDuplicate}},
		{touba.EnqueueResult{Digest: "d", Status: touba.StatusRunning}, dedupe.Answer{Code: touba.ETriggerReplayRejected}},
		{touba.EnqueueResult{Digest: "d", Status: touba.StatusDone}, dedupe.Answer{Code: touba.ETriggerReplayRejected}},
		{touba.EnqueueResult{Digest: "other", Status: touba.StatusPending}, dedupe.Answer{Code: touba.ETriggerEventPayloadConflict}},
		{touba.EnqueueResult{Digest: "other", Status: touba.StatusDone}, dedupe.Answer{Code: touba.ETriggerEventPayloadConflict}},
	} {
		if got := dedupe.Answered(tc.res, "d"); got != tc.want {
			t.Errorf("Answered(%+v)=%+v, want %+v", tc.res, got, tc.want)
		}
	}
}
