package senders_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// TestQuickstartSigningRecipe runs the README quick start's recipe for the
// signed trigger, examples/quickstart/send-signed.sh (bash, openssl, curl),
// against the quick start's program: its signature is accepted, the same
// delivery once run is answered 200 consumed, another body under its id is
// a conflict, another key is refused, and an unsigned request without
// webhook-id is refused 400 TriggerEventIdMissing.
func TestQuickstartSigningRecipe(t *testing.T) {
	for _, tool := range []string{"bash", "openssl", "curl", "base64", "od"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quick start's signing recipe needs %s: %v", tool, err)
		}
	}
	ex := filepath.Join(moduleRoot(), "examples", "quickstart")
	dir := t.TempDir()
	d := testkit.StartServer(t, server.Config{Program: filepath.Join(ex, "program.air.json"),
		Manifest: filepath.Join(ex, "touba.manifest.json"), Queue: filepath.Join(dir, "q.sqlite"),
		State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		AdminSocket: filepath.Join(dir, "admin.sock"), Workers: 2})
	send := func(env []string, args ...string) reply {
		t.Helper()
		cmd := exec.Command(filepath.Join(ex, "send-signed.sh"), args...)
		cmd.Env = append(os.Environ(), append([]string{"TOUBA_URL=" + d.URL()}, env...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("send-signed.sh %v: %v\n%s", args, err, out)
		}
		answer, status, _ := strings.Cut(string(out), "\n")
		var a struct {
			QueueID string `json:"queue_id"`
			Status  string `json:"status"`
			Code    string `json:"code"`
			Error   struct {
				Code    string `json:"code"`
				QueueID string `json:"queue_id"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(answer), &a); err != nil {
			t.Fatalf("send-signed.sh printed %q: %v", out, err)
		}
		r := reply{result: a.Status + a.Error.Code, code: a.Code, queueID: a.QueueID + a.Error.QueueID}
		// curl's -w line: "  (HTTP 202)".
		code := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(status), "(HTTP "), ")")
		if r.status, err = strconv.Atoi(code); err != nil {
			t.Fatalf("send-signed.sh printed no status: %q", out)
		}
		return r
	}
	first := send(nil, "msg_quick_1")
	want(t, "signed delivery", first, http.StatusAccepted, touba.IntakeEnqueued, "")
	var again reply
	testkit.WaitFor(t, 30*time.Second, func() bool {
		again = send(nil, "msg_quick_1")
		return again.status == http.StatusOK
	}, "the redelivery to be answered 200 once the entry ran")
	want(t, "redelivery after the run", again, http.StatusOK, touba.IntakeConsumed, first.queueID)
	want(t, "same id, another body", send(nil, "msg_quick_1", `{"amount": 11}`), http.StatusConflict, touba.ETriggerEventPayloadConflict, first.queueID)
	want(t, "another key", send([]string{"WEBHOOK_SECRET=whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, "msg_quick_2"),
		http.StatusUnauthorized, touba.ETriggerSignatureInvalid, "")
	status, _ := testkit.Post(t, d.URL()+"/triggers/examples.billing/SignedInvoice", "", `{"amount": 10}`)
	if status != http.StatusBadRequest {
		t.Fatalf("unsigned, no webhook-id: %d, want 400 TriggerEventIdMissing", status)
	}
}
