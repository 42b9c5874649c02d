package main

import (
	"strings"
	"testing"
)

// check prints an accepting trigger's routes, each route (no URL, its
// accepting trigger, its own filter, key and weight), and every CEL
// expression of the program with its JSON path and estimated cost; an
// accepting trigger with no steps is not warned of as idle.
func TestCheckPrintsRoutesAndExpressions(t *testing.T) {
	program := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:s/Events", "source": {"kind": "webhook", "max_body_bytes": 4096}, "steps": []},
	  {"ref": "trigger:s/Paid", "source": {"kind": "trigger", "trigger": "trigger:s/Events"},
	   "filter": [{"cel": "body.type == 'invoice.paid'"}], "concurrency": {"key": {"cel": "body.customer"}, "max": 1},
	   "dispatch": {"weight": 20},
	   "steps": [{"id": "post", "tool": "tool:s/Post", "when": "body.amount > 0",
	              "input": {"$cel": "{'amount': double(body.amount) / 100.0, 'currency': body.currency.upperAscii()}"}}]},
	  {"ref": "trigger:s/Refunded", "source": {"kind": "trigger", "trigger": "trigger:s/Events"},
	   "filter": [{"pointer": "/body/type", "equals": "charge.refunded"}],
	   "steps": [{"id": "post", "tool": "tool:s/Post", "input": {}}]}]}`
	manifest := `{"manifest_version": "touba-manifest-v1", "bindings": {"tool:s/Post": {"handler": {"kind": "accounting_stub"}, "effect_contract": {"kind": "none"}}}}`
	out, errOut, err := runCheckFiles(t, program, manifest)
	if err != nil {
		t.Fatalf("check: %v %s", err, errOut)
	}
	for _, want := range []string{
		"  trigger:s/Events  POST /triggers/s/Events  verify=none  steps=0  weight=10\n",
		"    routes (2), each fed in the transaction of this trigger's entry:\n" +
			"      -> trigger:s/Paid  filter cel(body.type == 'invoice.paid')\n" +
			"      -> trigger:s/Refunded  filter /body/type == \"charge.refunded\"\n" +
			"    its own entries end done at once (no steps): each delivery runs in its routes\n",
		"  trigger:s/Paid  route of trigger:s/Events (no URL: its deliveries are the ones trigger:s/Events accepts)  steps=1  weight=20\n" +
			"    filter: cel(body.type == 'invoice.paid')\n    concurrency key=cel:body.customer max=1\n",
		"expressions (4; estimated cost, at most 1000000 each by --expression-cost-limit):\n" +
			"  trigger:s/Paid  $.triggers[1].concurrency.key.cel  cost<=2  body.customer\n" +
			"  trigger:s/Paid  $.triggers[1].filter[0].cel  cost<=4  body.type == 'invoice.paid'\n" +
			// Estimated under the accepting trigger's max_body_bytes (4096),
			// the route's bound: at the default 1 MiB it is over the limit.
			"  trigger:s/Paid  $.triggers[1].steps[0].input[\"$cel\"]  cost<=4543  ",
		"  trigger:s/Paid  $.triggers[1].steps[0].when  cost<=3  body.amount > 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks\n%s\nin\n%s", want, out)
		}
	}
	if strings.Contains(out, "its entries do nothing") {
		t.Errorf("the accepting trigger is warned of as idle:\n%s", out)
	}
}
