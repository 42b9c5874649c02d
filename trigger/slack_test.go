package trigger_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
	"github.com/touba/touba-trigger/verify"
)

// TestSlackURLVerification: Slack's signed url_verification is answered
// 200 with its challenge and makes no entry, even where the trigger
// requires an event id (Slack sends none with it); unsigned it is 401; on
// a trigger that does not verify Slack it is an ordinary delivery.
func TestSlackURLVerification(t *testing.T) {
	const key = "slack-signing-secret"
	lookup := func(k string) (string, bool) { return key, k == "SLACK" }
	p, err := trigger.ParseProgram("p.json", []byte(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:s/slack", "source": {"kind": "webhook", "event_id": {"json_pointer": "/event_id", "required": true},
	   "verify": {"scheme": "slack", "secret": {"env": "SLACK"}}}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
	  {"ref": "trigger:s/plain", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := trigger.NewConfig(p, lookup, &secret.Set{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	q, err := queue.Open(context.Background(), filepath.Join(dir, "q.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := state.Open(context.Background(), filepath.Join(dir, "s.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in := &trigger.Intake{Queue: q, Log: st}
	in.SetConfig(cfg)
	srv := httptest.NewServer(in.Router(nil))
	defer srv.Close()

	// Slack's documented example (api.slack.com/events/url_verification).
	body := `{"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}`
	send := func(name string, sign bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/triggers/s/"+name, strings.NewReader(body))
		if sign {
			if err := verify.SignRequest(verify.Config{Scheme: verify.SchemeSlack, Secrets: []string{key}}, req.Header, []byte(body), time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, got := send("slack", true); code != 200 || !strings.Contains(got, `"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"`) {
		t.Fatalf("signed url_verification: %d %s, want 200 with the challenge", code, got)
	}
	if code, _ := send("slack", false); code != 401 {
		t.Fatalf("unsigned url_verification: %d, want 401 (its missing event id is not refused: Slack sends none)", code)
	}
	if code, got := send("plain", false); code != 202 || strings.Contains(got, "challenge") {
		t.Fatalf("url_verification on a trigger that verifies no Slack signature: %d %s, want an ordinary delivery", code, got)
	}
	entries, err := q.List(context.Background(), touba.EntryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].TriggerRef != "trigger:s/plain" {
		t.Fatalf("entries %+v: the challenge made one", entries)
	}
	st.Flush(context.Background())
	rows, err := st.Deliveries(context.Background(), touba.LogFilter{Code: trigger.LogURLVerification, Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].StatusCode != 200 {
		t.Fatalf("delivery log of the challenge: %+v %v", rows, err)
	}
}
