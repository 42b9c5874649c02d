package main_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// /readyz on the public port says ready and nothing more: no file path,
// no free bytes. The details are on the admin socket.
func TestReadyzIsTerseAndDetailsAreOnTheAdminSocket(t *testing.T) {
	f := writeFiles(t, e2eProgram, e2eManifest)
	d := testkit.StartServer(t, server.Config{Program: f.program, Manifest: f.manifest, Queue: f.queue, State: f.state,
		Journal: f.journal, AdminSocket: filepath.Join(f.dir, "admin.sock"), Workers: 4})
	resp, err := http.Get(d.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"status":"ready"}` {
		t.Fatalf("readyz: %d %s", resp.StatusCode, body)
	}
	c, err := admin.Dial(filepath.Join(f.dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !h.Ready || len(h.Files) != 3 || h.Files[0].Path == "" || h.Files[0].FreeBytes == 0 {
		t.Fatalf("admin health: %+v, want ready with the three files and their free bytes", h)
	}
}
