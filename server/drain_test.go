package server

import (
	"net"
	"testing"
)

// TestTrackerClosesOnce: the drain closes the listener and Shutdown then
// closes it again unless Serve let go of it in between, which is a race.
// The second close must not be an error: it was logged as a failed
// shutdown on clean stops.
func TestTrackerClosesOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := newConnTracker(ln)
	if err := tr.Close(); err != nil {
		t.Fatalf("first close: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second close: %v, want the first close's nil", err)
	}
	if _, err := tr.Accept(); err == nil {
		t.Fatal("Accept after Close succeeded")
	}
}
