package main_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestDeliveryLogFloodOnDatabase is TestDeliveryLogFlood on --database
// (SPEC §6, §8): the same flood of 60 KB rejections, and the delivery log
// in PostgreSQL keeps --delivery-log-max-bytes (applied by the log's prune,
// every 30 s) with its fields trimmed, the daemon's memory stays bounded,
// and every valid delivery posted during the flood is acknowledged 202.
func TestDeliveryLogFloodOnDatabase(t *testing.T) {
	dsn := pgtest.New(t)
	f := writeFiles(t, floodProgram, e2eManifest)
	d := testkit.Start(t, floodEnv, "serve", f.program, "--manifest", f.manifest, "--database", dsn, "--node-id", "flood",
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(f.dir, "admin.sock"),
		"--log-level", "info", "--workers", "0", "--delivery-log-max-bytes", strconv.Itoa(floodLogMaxBytes))
	quiet, flooded, sent := flood(t, d.URL())

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, sum, maxRef, maxHdr int64
	read := func() {
		if err := conn.QueryRow(ctx, `SELECT COUNT(*), coalesce(SUM(size), 0), coalesce(MAX(length(trigger_ref)), 0),
			coalesce(MAX(length(headers)), 0) FROM touba.deliveries`).Scan(&rows, &sum, &maxRef, &maxHdr); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		var end int
		if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM touba.deliveries WHERE trigger_ref = 'trigger:flood-end'`).Scan(&end); err != nil {
			t.Fatal(err)
		}
		return end > 0
	}, "the last rejection's row")
	// The byte bound is the prune's: within one prune interval (30 s).
	testkit.WaitFor(t, 75*time.Second, func() bool { read(); return sum <= floodLogMaxBytes }, "the log's prune to its byte bound")
	hwm := vmHWM(t, d.Cmd.Process.Pid)
	t.Logf("valid deliveries, quiet: %s", quantiles(quiet))
	t.Logf("valid deliveries, flood: %s", quantiles(flooded))
	t.Logf("flood: %d requests of 60 KB; log: %d rows, %d bytes counted, longest trigger_ref %d, headers %d; daemon VmHWM %.1f MiB",
		sent, rows, sum, maxRef, maxHdr, float64(hwm)/(1<<20))
	if maxRef > 256 || maxHdr > 8192+1024 {
		t.Errorf("trigger_ref up to %d bytes, headers up to %d", maxRef, maxHdr)
	}
	if hwm > floodRSSMax {
		t.Errorf("daemon VmHWM %d bytes, bound %d", hwm, floodRSSMax)
	}
}
