package console_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// cannedTester answers a test as the daemon's would, from a fixed
// outcome per event id, and records which program it was asked for.
type cannedTester struct {
	program *[]byte
}

func (c cannedTester) Source(ref string) (string, bool, error) {
	if ref != "trigger:s/Paid" {
		return "", false, touba.Errorf(touba.ENotFound, "no trigger %s", ref)
	}
	return "trigger:s/Events", true, nil
}

func (c cannedTester) Try(ref string, d *touba.Delivery) touba.TriedDelivery {
	if d.EventID == "e1" {
		yes := true
		return touba.TriedDelivery{Taken: true, Keys: []touba.TriedKey{{Name: "concurrency.key", Value: `"cus_1"`}},
			Steps: []touba.TriedStep{{ID: "post", Kind: "tool:x/Post", When: &yes, Input: []byte(`{"amount":12}`)}}}
	}
	return touba.TriedDelivery{Code: touba.IntakeFiltered, FilteredBy: ref}
}

// TestTriggerTestPage: the Triggers page links each trigger's test; the
// test page tries it on the source's stored deliveries (the running
// program on a GET, a pasted candidate on a POST) and shows what each
// would do; the entry page of an accepting entry lists its routes.
func TestTriggerTestPage(t *testing.T) {
	f := newFixture(t, 50)
	var asked []byte
	f.svc.Tester = func(program []byte, path string) (admin.Tester, error) {
		asked = program
		return cannedTester{&asked}, nil
	}
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:s/Events", Routes: []string{"trigger:s/Paid"}},
			{Ref: "trigger:s/Paid", RouteOf: "trigger:s/Events"}}
	}
	ctx := context.Background()
	d := &touba.Delivery{TriggerRef: "trigger:s/Events", EventID: "e1", Digest: "d", Body: []byte(`{"type":"paid"}`),
		Routing: &touba.Routing{Routes: []touba.RouteOutcome{{TriggerRef: "trigger:s/Paid", Fed: true}}}}
	d.Routes = []*touba.Delivery{{TriggerRef: "trigger:s/Paid", EventID: "e1", Digest: "d", Body: d.Body}}
	res, err := f.q.Enqueue(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	f.entry(t, "trigger:s/Events", "e2", `{"type":"other"}`, touba.StatusPending)
	b := f.login(t)

	_, body := b.get("/triggers")
	if !strings.Contains(body, `<tr class="route">`) || !strings.Contains(body, `href="/triggers/test?ref=trigger%3as%2fPaid"`) {
		t.Fatalf("triggers page: no route row or test link\n%s", body)
	}
	resp, body := b.get("/triggers/test?ref=trigger:s/Paid&last=5")
	if resp.StatusCode != 200 || asked != nil || !strings.Contains(body, "A route of <b>trigger:s/Events</b>") ||
		!strings.Contains(body, "2 tried, <b>1</b> taken") || !strings.Contains(body, "key concurrency.key = <code>&#34;cus_1&#34;</code>") ||
		!strings.Contains(body, `input <code>{&#34;amount&#34;:12}</code>`) {
		t.Fatalf("test page: %d\n%s", resp.StatusCode, body)
	}
	// A candidate program: sent as typed, kept in the form.
	resp, body = b.action("/triggers/test", url.Values{"ref": {"trigger:s/Paid"}, "program": {`{"air_version": "touba-air-v1"}`}})
	if resp.StatusCode != 200 || string(asked) != `{"air_version": "touba-air-v1"}` || !strings.Contains(body, "of the candidate program") ||
		!strings.Contains(body, "touba-air-v1&#34;}</textarea>") {
		t.Fatalf("candidate: %d, asked %q\n%s", resp.StatusCode, asked, body)
	}
	// A trigger the program lacks: refused on the page, the form kept.
	_, body = b.get("/triggers/test?ref=trigger:nope")
	if !strings.Contains(body, `id="refusal"`) || !strings.Contains(body, `value="trigger:nope"`) {
		t.Fatalf("unknown trigger:\n%s", body)
	}
	_, body = b.get("/entries/" + res.QueueID)
	if !strings.Contains(body, `<table id="routes">`) || !strings.Contains(body, res.Routes[0].QueueID) {
		t.Fatalf("entry page: no routes table naming %s\n%s", res.Routes[0].QueueID, body)
	}
	_, body = b.get("/entries/" + res.Routes[0].QueueID)
	if !strings.Contains(body, `id="entry-routed-from"`) || !strings.Contains(body, res.QueueID) {
		t.Fatalf("route entry page: no routed from\n%s", body)
	}
}
