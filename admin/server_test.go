package admin_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// shortDir is a temporary folder with a short path: a unix socket path
// must fit in 108 bytes.
func shortDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ta")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve runs svc on a socket and returns a client for it.
func serve(tb testing.TB, svc admin.API) (*admin.Server, *admin.Client) {
	tb.Helper()
	srv, err := admin.Listen(filepath.Join(shortDir(tb), "run", "admin.sock"), svc)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Close(ctx)
		if err := <-done; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	c, err := admin.Dial(srv.Path)
	if err != nil {
		tb.Fatal(err)
	}
	return srv, c
}

func TestSocketModeAndRoundTrip(t *testing.T) {
	f := mustFiles(t)
	srv, c := serve(t, f.svc)
	fi, err := os.Stat(srv.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Fatalf("socket mode=%v, want %v", got, want)
	}
	if fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("%s is not a socket: %v", srv.Path, fi.Mode())
	}
	ctx := context.Background()
	q := f.entry(t, "e", `{"n":1}`, touba.StatusParked)
	id := f.effect(t, q, "charge", touba.RetryReconcile, touba.EffectUnknown)

	list, err := c.Entries(ctx, admin.EntryFilter{Status: touba.StatusParked})
	if err != nil || len(list) != 1 || list[0].QueueID != q {
		t.Fatalf("entries over the socket: %v %+v", err, list)
	}
	effs, err := c.Effects(ctx, admin.EffectFilter{State: touba.EffectUnknown})
	if err != nil || len(effs) != 1 || effs[0].EffectID != id {
		t.Fatalf("effects over the socket: %v %+v", err, effs)
	}
	// Codes survive the trip.
	if _, err := c.Entry(ctx, "nope"); touba.ErrorCode(err) != touba.ENotFound {
		t.Fatalf("missing entry over the socket: %v", err)
	}
	if _, err := c.ReplayEntries(ctx, admin.ReplayRequest{Status: "done"}); touba.ErrorCode(err) != touba.EBadRequest {
		t.Fatalf("bad replay over the socket: %v", err)
	}
	res, err := c.Resolve(ctx, admin.ResolveRequest{Scope: q, EffectID: id, State: touba.EffectApplied, ReceiptRef: "order:1"})
	if err != nil || !res.Replayed {
		t.Fatalf("resolve over the socket: %v %+v", err, res)
	}
	if _, err := c.Resolve(ctx, admin.ResolveRequest{Scope: q, EffectID: id, State: touba.EffectNotApplied}); touba.ErrorCode(err) != touba.EEffectNotUnknown {
		t.Fatalf("second resolve over the socket: %v", err)
	}
	// The audit trail names the peer by its kernel credentials.
	ev := f.operatorEvents(t, q)
	if len(ev) == 0 || !strings.Contains(ev[0].Operator, "uid ") {
		t.Fatalf("operator of a socket request: %+v", ev)
	}
	d, err := c.Entry(ctx, q)
	if err != nil || d.Status != touba.StatusPending || len(d.Effects) != 1 || d.Effects[0].ReceiptRef != "order:1" {
		t.Fatalf("entry over the socket: %v %+v", err, d)
	}
}

func TestDialWithoutDaemon(t *testing.T) {
	dir := shortDir(t)
	if _, err := admin.Dial(filepath.Join(dir, "absent.sock")); !errors.Is(err, admin.ErrNoDaemon) {
		t.Fatalf("dial of an absent socket: %v, want ErrNoDaemon", err)
	}
	// A socket file left by a dead process refuses connections.
	path := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := admin.Dial(path); !errors.Is(err, admin.ErrNoDaemon) {
		t.Fatalf("dial of a stale socket: %v, want ErrNoDaemon", err)
	}
	// Listen replaces the stale file, and refuses to take a live one.
	svc := mustFiles(t).svc
	srv, err := admin.Listen(path, svc)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close(context.Background()) })
	if _, err := admin.Listen(path, svc); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("listen over a live socket: %v", err)
	}
	// A regular file is never removed.
	file := filepath.Join(dir, "file.sock")
	os.WriteFile(file, []byte("x"), 0o600)
	if _, err := admin.Listen(file, svc); err == nil {
		t.Fatal("listen over a regular file succeeded")
	}
}
