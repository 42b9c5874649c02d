package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Deliveries is the table of `deliveries ls`: the delivery log.
func Deliveries(w io.Writer, rows []touba.LoggedDelivery) error {
	t := newTable(w, "DELIVERY_ID", "AT", "TRIGGER", "EVENT_ID", "STATUS", "CODE", "QUEUE_ID", "REMOTE", "BODY")
	for _, r := range rows {
		body := "-"
		if r.BodyStored {
			body = "stored"
		}
		t.row(r.DeliveryID, ts(r.At), r.TriggerRef, r.EventID, strconv.Itoa(r.StatusCode), r.ErrorCode, r.QueueID, r.RemoteAddr, body)
	}
	return t.flush()
}

// Delivery is `deliveries show`: the logged request, its headers and
// body, and whether it can be replayed.
func Delivery(w io.Writer, d *admin.DeliveryDetail) error {
	field(w, "delivery id", d.DeliveryID)
	field(w, "at", ts(d.At))
	field(w, "trigger", d.TriggerRef)
	field(w, "event id", d.EventID)
	field(w, "answer", strconv.Itoa(d.StatusCode)+" "+d.ErrorCode)
	field(w, "queue id", d.QueueID)
	field(w, "remote", d.RemoteAddr)
	field(w, "digest", d.Digest)
	names := slices.Sorted(maps.Keys(d.Headers))
	fmt.Fprintln(w, "headers")
	for _, k := range names {
		fmt.Fprintf(w, "  %s: %s\n", cell(k, 80), cell(d.Headers[k], 200))
	}
	printBody(w, "body", d.Body, false)
	if d.Replayable {
		field(w, "replay", d.Hint)
	} else {
		field(w, "replay", "not possible: "+d.Hint)
	}
	return nil
}

// DeliveryReplay says what `deliveries replay` did; a delivery that was
// not enqueued is a refusal under the answer's code, for the exit code.
func DeliveryReplay(w io.Writer, asJSON bool, r *admin.DeliveryReplay) error {
	var err error
	if asJSON {
		err = JSON(w, r)
	} else if r.Status != "" {
		fmt.Fprintf(w, "%s: %s as %s (trigger %s, event id %s)\n", r.DeliveryID, r.Status, r.QueueID, r.TriggerRef, r.EventID)
		if r.Hint != "" {
			fmt.Fprintln(w, r.Hint)
		}
	} else {
		fmt.Fprintf(w, "%s: %s: %s\n%s\n", r.DeliveryID, r.Code, r.Message, r.Hint)
	}
	if err == nil && r.Status == "" {
		err = touba.Errorf(r.Code, "delivery %s not enqueued", r.DeliveryID)
	}
	return err
}
