package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// runDeliveries is `touba-trigger deliveries ls|show|replay` (SPEC §6): the
// delivery log of requests that did not create an entry.
func runDeliveries(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, args, fs, f, err := operatorVerb("deliveries", args, stderr, true, "ls", "show", "replay")
	if err != nil {
		return err
	}
	switch verb {
	case "ls":
		var flt admin.DeliveryFilter
		var since time.Duration
		fs.BoolVar(&flt.Rejected, "rejected", false, "only rejections (status 400 and above, and redeliveries of consumed entries)")
		fs.StringVar(&flt.Code, "code", "", "only this error code, such as TriggerSignatureInvalid")
		fs.StringVar(&flt.TriggerRef, "trigger", "", "only this trigger")
		fs.DurationVar(&since, "since", 0, "only the last DURATION, such as 1h")
		fs.IntVar(&flt.Limit, "limit", 100, "most rows listed, newest first")
		if pos, err := parseCLI(fs, args, false); err != nil {
			return err
		} else if len(pos) > 0 {
			return usageError{err: fmt.Errorf("deliveries ls takes no arguments, got %q", pos)}
		}
		if since < 0 {
			return usageError{err: errors.New("--since must not be negative")}
		}
		if since > 0 {
			flt.Since = time.Now().Add(-since)
		}
		return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
			rows, err := api.Deliveries(ctx, flt)
			if err != nil || f.json {
				return orJSON(stdout, rows, err)
			}
			t := newTable(stdout, "DELIVERY_ID", "AT", "TRIGGER", "EVENT_ID", "STATUS", "CODE", "QUEUE_ID", "REMOTE", "BODY")
			for _, r := range rows {
				body := "-"
				if r.BodyStored {
					body = "stored"
				}
				t.row(r.DeliveryID, ts(r.At), r.TriggerRef, r.EventID, strconv.Itoa(r.StatusCode), r.ErrorCode, r.QueueID, r.RemoteAddr, body)
			}
			return t.flush()
		})
	case "show":
		pos, err := parseCLI(fs, args, false)
		if err != nil {
			return err
		} else if len(pos) != 1 {
			return usageError{err: errors.New("deliveries show takes one DELIVERY_ID")}
		}
		return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
			d, err := api.Delivery(ctx, pos[0])
			if err != nil || f.json {
				return orJSON(stdout, d, err)
			}
			printDelivery(stdout, d)
			return nil
		})
	}
	var req admin.DeliveryReplayRequest
	fs.BoolVar(&req.NewEventID, "new-event-id", false, "enqueue under a fresh identity replay-<uuidv7> instead of its event id")
	fs.StringVar(&req.Reason, "reason", "", "why, for the audit trail")
	pos, err := parseCLI(fs, args, false)
	if err != nil {
		return err
	} else if len(pos) != 1 {
		return usageError{err: errors.New("deliveries replay takes one DELIVERY_ID")}
	}
	req.DeliveryID = pos[0]
	return withSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
		r, err := api.ReplayDelivery(ctx, req)
		if err != nil {
			return err
		}
		if f.json {
			err = printJSON(stdout, r)
		} else if r.Status != "" {
			fmt.Fprintf(stdout, "%s: %s as %s (trigger %s, event id %s)\n", r.DeliveryID, r.Status, r.QueueID, r.TriggerRef, r.EventID)
			if r.Hint != "" {
				fmt.Fprintln(stdout, r.Hint)
			}
		} else {
			fmt.Fprintf(stdout, "%s: %s: %s\n%s\n", r.DeliveryID, r.Code, r.Message, r.Hint)
		}
		if err == nil && r.Status == "" {
			err = touba.Errorf(r.Code, "delivery %s not enqueued", r.DeliveryID)
		}
		return err
	})
}

func printDelivery(w io.Writer, d *admin.DeliveryDetail) {
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
}
