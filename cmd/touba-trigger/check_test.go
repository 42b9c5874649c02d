package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check names every trigger whose signature does not cover its event id,
// and only those.
func TestCheckWarnsOfReplayableTriggers(t *testing.T) {
	t.Setenv("CHECK_TEST_KEY", "k-1234567890")
	t.Setenv("CHECK_TEST_SW", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	out := checkOutput(t, `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:gh/Push", "source": {"kind": "webhook", "verify": {"scheme": "github", "secret": {"env": "CHECK_TEST_KEY"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:sw/Msg", "source": {"kind": "webhook", "verify": {"scheme": "standard-webhooks", "secret": {"env": "CHECK_TEST_SW"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`)
	var warnings []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "warning:") {
			warnings = append(warnings, l)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "trigger:gh/Push") || !strings.Contains(warnings[0], "X-Github-Delivery") {
		t.Fatalf("warnings %q, want one naming trigger:gh/Push and its unsigned header:\n%s", warnings, out)
	}
}

// checkOutput runs check on program with one stub binding, tool:t/Do.
func checkOutput(t *testing.T, program string) string {
	t.Helper()
	t.Setenv("CHECK_TEST_KEY", "k-1234567890")
	out, errOut, err := runCheckFiles(t, program, `{"manifest_version": "touba-manifest-v1", "bindings": {
	  "tool:t/Do": {"handler": {"kind": "accounting_stub"}, "effect_contract": {"kind": "none"}}}}`)
	if err != nil {
		t.Fatalf("check: %v %s", err, errOut)
	}
	return out
}

// runCheckFiles writes program and manifest to files and runs check on
// them.
func runCheckFiles(t *testing.T, program, manifest string) (stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	pp, mp := filepath.Join(dir, "p.json"), filepath.Join(dir, "m.json")
	if err := os.WriteFile(pp, []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mp, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = runCheck(context.Background(), []string{"--manifest", mp, pp}, &out, &errOut)
	return out.String(), errOut.String(), err
}

// check prints each trigger's scheme, and for hmac-sha256 the header,
// encoding and prefix in effect, defaults included.
func TestCheckPrintsSchemes(t *testing.T) {
	out := checkOutput(t, `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:shop/Order", "source": {"kind": "webhook", "verify": {"scheme": "shopify", "secret": {"env": "CHECK_TEST_KEY"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:h/Default", "source": {"kind": "webhook", "verify": {"scheme": "hmac-sha256", "secret": {"env": "CHECK_TEST_KEY"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:h/Acme", "source": {"kind": "webhook", "verify": {"scheme": "hmac-sha256", "header": "x-acme-sig",
	    "encoding": "base64", "prefix": "", "secret": {"env": "CHECK_TEST_KEY"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`)
	for _, want := range []string{
		"trigger:shop/Order  POST /triggers/shop/Order  verify=shopify  steps=1  weight=10\n    event_id: header X-Shopify-Webhook-Id (required)",
		`verify=hmac-sha256(header=X-Signature,encoding=hex,prefix="sha256=")`,
		`verify=hmac-sha256(header=X-Acme-Sig,encoding=base64,prefix="")`,
		"warning: trigger:shop/Order: the shopify signature does not cover the event id header X-Shopify-Webhook-Id",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// check prints, per trigger, where its event id comes from, whether a
// delivery without one is refused, and what a redelivery is answered.
func TestCheckPrintsEventIDSource(t *testing.T) {
	out := checkOutput(t, `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:st/Pay", "source": {"kind": "webhook", "verify": {"scheme": "stripe", "secret": {"env": "CHECK_TEST_KEY"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:st/Loose", "source": {"kind": "webhook", "event_id": {"required": false}, "redelivery": "reject",
	     "verify": {"scheme": "stripe", "secret": {"env": "CHECK_TEST_KEY"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:plain/Hook", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`)
	want := "  trigger:st/Pay  POST /triggers/st/Pay  verify=stripe  steps=1  weight=10\n" +
		"    event_id: body /id (required)  redelivery=acknowledge\n" +
		"  trigger:st/Loose  POST /triggers/st/Loose  verify=stripe  steps=1  weight=10\n" +
		"    event_id: body /id (optional)  redelivery=reject\n" +
		"  trigger:plain/Hook  POST /triggers/plain/Hook  verify=none  steps=1  weight=10\n" +
		"    event_id: header X-Touba-Event-Id (optional)  redelivery=acknowledge\n"
	if !strings.Contains(out, want) {
		t.Fatalf("check printed:\n%s\nwant it to hold:\n%s", out, want)
	}
}

// check prints each trigger's dispatch weight, the default included.
func TestCheckPrintsTheWeight(t *testing.T) {
	out := checkOutput(t, `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:w/Heavy", "source": {"kind": "webhook"}, "dispatch": {"weight": 40}, "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:w/Plain", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:t/Do"}]},
	  {"ref": "trigger:w/Nightly", "source": {"kind": "schedule", "cron": "0 3 * * *"}, "dispatch": {"weight": 1},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`)
	for _, want := range []string{
		"  trigger:w/Heavy  POST /triggers/w/Heavy  verify=none  steps=1  weight=40\n",
		"  trigger:w/Plain  POST /triggers/w/Plain  verify=none  steps=1  weight=10\n",
		"trigger:w/Nightly  schedule cron=\"0 3 * * *\" timezone=UTC catch_up=last  steps=1  weight=1  (no HTTP route)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// A refusal names what the file holds: an unresolvable "secret" is
// verify.secret (not secrets[0]), a syntax error is a line and column.
func TestCheckNamesWhatTheFileHolds(t *testing.T) {
	m := `{"manifest_version": "touba-manifest-v1", "bindings": {
	  "tool:t/Do": {"handler": {"kind": "accounting_stub"}, "effect_contract": {"kind": "none"}}}}`
	_, _, err := runCheckFiles(t, `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:gh/Push", "source": {"kind": "webhook", "verify": {"scheme": "github", "secret": {"env": "CHECK_TEST_UNSET"}}},
	   "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`, m)
	if err == nil || !strings.Contains(err.Error(), "$.triggers[0].source.verify.secret: ") {
		t.Errorf("an unresolvable secret: %v, want it named at verify.secret", err)
	}
	_, _, err = runCheckFiles(t, "{\"air_version\": \"touba-air-v1\",\n \"triggers\": [\n  {\"ref\": x}]}", m)
	if err == nil || !strings.Contains(err.Error(), "invalid JSON at line 3, column 11") {
		t.Errorf("a syntax error: %v, want its line and column", err)
	}
}

// Each command's -h starts with its synopsis, then its flags.
func TestHelpShowsTheSynopsis(t *testing.T) {
	for _, args := range [][]string{{"check", "-h"}, {"queue", "ls", "-h"}, {"serve", "-h"}, {"effects", "resolve", "-h"}} {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut.String())
		}
		help := out.String() + errOut.String()
		name := strings.Join(args[:len(args)-1], " ")
		if !strings.HasPrefix(help, "usage:\n  touba-trigger "+name+" ") || !strings.Contains(help, "\nflags") {
			t.Errorf("%v:\n%s\nwant the synopsis of %q first, then the flags", args, help, name)
		}
	}
	var out bytes.Buffer
	Run(context.Background(), []string{"--help"}, &out, &out)
	for _, flag := range []string{"--database", "--console-listen"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not mention %s:\n%s", flag, out.String())
		}
	}
}
