package main

import (
	"context"
	"io"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/report"
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
		if pos, err := f.Parse(fs, args); err != nil {
			return err
		} else if len(pos) > 0 {
			return cli.Usagef("deliveries ls takes no arguments, got %q", pos)
		}
		if since < 0 {
			return cli.Usagef("--since must not be negative")
		}
		if since > 0 {
			flt.Since = time.Now().Add(-since)
		}
		return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
			rows, err := api.Deliveries(ctx, flt)
			return report.Answer(stdout, f.JSON, rows, err, report.Deliveries)
		})
	case "show":
		pos, err := f.Parse(fs, args)
		if err != nil {
			return err
		} else if len(pos) != 1 {
			return cli.Usagef("deliveries show takes one DELIVERY_ID")
		}
		return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
			d, err := api.Delivery(ctx, pos[0])
			return report.Answer(stdout, f.JSON, d, err, report.Delivery)
		})
	}
	var req admin.DeliveryReplayRequest
	fs.BoolVar(&req.NewEventID, "new-event-id", false, "enqueue under a fresh identity replay-<uuidv7> instead of its event id")
	fs.StringVar(&req.Reason, "reason", "", "why, for the audit trail")
	pos, err := f.Parse(fs, args)
	if err != nil {
		return err
	} else if len(pos) != 1 {
		return cli.Usagef("deliveries replay takes one DELIVERY_ID")
	}
	req.DeliveryID = pos[0]
	return f.Session(ctx, stderr, func(ctx context.Context, api admin.API) error {
		r, err := api.ReplayDelivery(ctx, req)
		if err != nil {
			return err
		}
		return report.DeliveryReplay(stdout, f.JSON, r)
	})
}
