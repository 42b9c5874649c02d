// Package testkit is what the tests share: the real daemon started as a
// child (Start) or in process on port 0 (StartServer), one delivery posted
// (Post), one page read (Get), one wait on a condition with a deadline
// (WaitFor), and the files
// of a stopped daemon read back (Entries, Effects). Every helper cleans up
// after itself with tb.Cleanup.
package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// WaitFor polls cond until it holds and fails the test, naming what it
// waited for, after timeout. Conditions are read from the code under test
// (a file, a counter, a log line); the poll only bounds how soon a change
// is seen, never what the test asserts.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() bool, what string) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			if cond() {
				return
			}
			tb.Fatalf("waited %v for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// Post sends one delivery to url with eventID as X-Touba-Event-Id (unless
// empty) and
// header's name, value pairs, and returns the status and the queue id the
// answer names (of the entry made, or of the one it collides with). On a
// transport error or an answer that is not JSON it marks the test failed
// and returns status 0: it may be called from any goroutine.
func Post(tb testing.TB, url, eventID, body string, header ...string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Errorf("post %s: %v", eventID, err)
		return 0, ""
	}
	if eventID != "" { // "": the trigger reads it from the body
		req.Header.Set("X-Touba-Event-Id", eventID)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Errorf("post %s: %v", eventID, err)
		return 0, ""
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
		Error   struct {
			QueueID string `json:"queue_id"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		tb.Errorf("post %s: status %d, answer: %v", eventID, resp.StatusCode, err)
		return 0, ""
	}
	return resp.StatusCode, a.QueueID + a.Error.QueueID
}

// Get returns the status and body of a GET of url (a probe, a metrics
// page), failing the test on a transport error.
func Get(tb testing.TB, url string) (int, string) {
	tb.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
