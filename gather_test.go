package touba_test

import (
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Merge decides a gathering's next start: debounce a window after the
// last delivery, never past its deadline nor before its current start; a
// batch keeps its start; either starts at once when it holds its limit.
func TestGatherMerge(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	f := func(s int) string { return touba.FormatTime(at(s)) }
	deb := &touba.GatherSpec{Kind: touba.GatherDebounce, Key: "k", Window: 5 * time.Second, MaxWait: 12 * time.Second}
	bat := &touba.GatherSpec{Kind: touba.GatherBatch, Key: "k", Window: 10 * time.Second, MaxSize: 3}
	for _, tt := range []struct {
		name    string
		g       *touba.GatherSpec
		now     int
		size    int
		wake    int
		want    touba.GatherMerge
		wantErr bool
	}{
		{"debounce moves", deb, 2, 1, 5, touba.GatherMerge{Size: 2, Wake: at(7)}, false},
		{"debounce bounded", deb, 9, 4, 12, touba.GatherMerge{Size: 5, Wake: at(12)}, false},
		{"debounce never earlier", deb, 1, 2, 8, touba.GatherMerge{Size: 3, Wake: at(8)}, false},
		{"debounce at its limit", deb, 3, touba.MaxGathered - 1, 7, touba.GatherMerge{Size: touba.MaxGathered, Wake: at(3), Started: true}, false},
		{"batch keeps its time", bat, 4, 1, 10, touba.GatherMerge{Size: 2, Wake: at(10)}, false},
		{"batch full", bat, 4, 2, 10, touba.GatherMerge{Size: 3, Wake: at(4), Started: true}, false},
		{"batch over a lowered size", bat, 4, 7, 10, touba.GatherMerge{Size: 8, Wake: at(4), Started: true}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.g.Merge(at(tt.now), tt.size, 0, 0, f(tt.wake), f(12))
			if err != nil || got != tt.want {
				t.Fatalf("Merge: %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	// max_bytes (issue 43): the delivery that brings the bodies to the
	// limit, or past it, starts the gathering at once; 0 is the default.
	small := &touba.GatherSpec{Kind: touba.GatherDebounce, Key: "k", Window: 5 * time.Second, MaxWait: 12 * time.Second, MaxBytes: 100}
	if got, err := small.Merge(at(2), 1, 60, 39, f(5), f(12)); err != nil || got.Started || got.Bytes != 99 {
		t.Fatalf("Merge under max_bytes: %+v, %v; want not started, 99 bytes", got, err)
	}
	if got, err := small.Merge(at(2), 1, 60, 40, f(5), f(12)); err != nil || !got.Started || got.Wake != at(2) || got.Bytes != 100 {
		t.Fatalf("Merge at max_bytes: %+v, %v; want started at once with 100 bytes", got, err)
	}
	if got, err := deb.Merge(at(2), 1, touba.DefaultGatherMaxBytes-1, 1, f(5), f(12)); err != nil || !got.Started {
		t.Fatalf("Merge at the default max_bytes: %+v, %v; want started", got, err)
	}
	if _, err := deb.Merge(t0, 1, 0, 0, "yesterday", f(12)); err == nil {
		t.Fatalf("Merge read a wake_at that is not a stored time")
	}
	for _, bad := range []touba.GatherSpec{{Kind: "throttle", Key: "k", Window: time.Second},
		{Kind: touba.GatherDebounce, Window: time.Second, MaxWait: time.Second},
		{Kind: touba.GatherDebounce, Key: "k", Window: 2 * time.Second, MaxWait: time.Second},
		{Kind: touba.GatherBatch, Key: "k", Window: time.Second, MaxSize: 1},
		{Kind: touba.GatherBatch, Key: "k", MaxSize: 5}} {
		if bad.Check() == nil {
			t.Errorf("Check accepted %+v", bad)
		}
	}
}
