package touba_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
)

func TestClean(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"trigger:orders/Created", "trigger:orders/Created"},
		{"café", "café"},
		{"\x00", "\uFFFD"},
		{"a\x00b", "a\uFFFDb"},
		{"\xff", "\uFFFD"},
		{"x\xc3(", "x\uFFFD("},
		{"\xff\xfe\xfd", "\uFFFD"}, // one run of invalid bytes, one U+FFFD
		{"\xed\xa0\x80", "\uFFFD"}, // an encoded surrogate half
		{"\x00\xff", "\uFFFD\uFFFD"},
	} {
		if got := touba.Clean(tt.in); got != tt.want {
			t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestTrimCleansThenCuts: cleaning can grow a field (one byte becomes the
// three of U+FFFD), so Trim cleans first and the cap still holds.
func TestTrimCleansThenCuts(t *testing.T) {
	d := &touba.LoggedDelivery{TriggerRef: "trigger:" + strings.Repeat("\xff\x00", 200), EventID: "e\x00",
		RemoteAddr: "\xff", Headers: map[string]string{"x-a\xff": "\x00"}}
	d.Trim()
	for _, s := range []string{d.TriggerRef, d.EventID, d.RemoteAddr, d.Headers["x-a\uFFFD"]} {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			t.Fatalf("field %q not cleaned", s)
		}
	}
	if len(d.TriggerRef) > touba.MaxRefBytes || !strings.HasSuffix(d.TriggerRef, touba.TruncatedMark) {
		t.Fatalf("trigger_ref of %d bytes %q, want cut to %d", len(d.TriggerRef), d.TriggerRef, touba.MaxRefBytes)
	}
	if d.EventID != "e\uFFFD" || d.Headers["x-a\uFFFD"] != "\uFFFD" {
		t.Fatalf("event id %q, headers %q", d.EventID, d.Headers)
	}
}
