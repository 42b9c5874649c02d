package isolation_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/natstest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestKilledAndRestartedAsTheDaemonsUser: the daemon under the shipped
// unit's privileges (setpriv: nobody, no new privileges, no capabilities)
// is killed with SIGKILL while it publishes, and started again the same way
// on the files it left: their journal, WAL and lock files, and its admin
// socket, all nobody's. It must start without root's help (no file it
// cannot open, no socket it cannot replace, no lock it cannot take over)
// and bring every accepted delivery to the stream once.
func TestKilledAndRestartedAsTheDaemonsUser(t *testing.T) {
	broker := natstest.Start(t)
	broker.Stream("ISO", time.Minute, "iso.>")
	dir, daemonBin := daemonDir(t)
	writeFile(t, filepath.Join(dir, "program.air.json"), routedProgram)
	writeFile(t, filepath.Join(dir, "touba.manifest.json"), routedManifest(broker.URL()))
	secret := "isolation-" + fmt.Sprint(time.Now().UnixNano())
	env := []string{secretVar + "=" + secret, "ISO_WORKER_TOKEN=" + workerToken}
	d := testkit.StartCmd(t, setprivCmd(t, dir, daemonBin), env)

	const n = 20
	for i := range n {
		deliverBody(t, d, "Events", fmt.Sprintf("n-%d", i), `{"type":"n"}`, secret)
		deliverBody(t, d, "Events", fmt.Sprintf("w-%d", i), `{"type":"w"}`, secret) // waits for a worker
	}
	testkit.WaitFor(t, 30*time.Second, testkit.Every(10*time.Millisecond, func() bool {
		return len(broker.Messages("ISO")) >= 3
	}), "the first publishes")
	d.Kill()
	if _, err := os.Stat(filepath.Join(dir, "admin.sock")); err != nil {
		t.Logf("no admin socket left behind: %v", err)
	}

	d = testkit.StartCmd(t, setprivCmd(t, dir, daemonBin), env)
	worked := runWorker(t, d.URL())
	testkit.WaitFor(t, 60*time.Second, testkit.Every(100*time.Millisecond, func() bool {
		return len(broker.Messages("ISO")) >= n && worked.count() >= n
	}), fmt.Sprintf("%d messages in the stream and %d calls at the worker", n, n))
	onceInStream(t, broker, n)
	worked.once(t, n)
	c, err := admin.Dial(filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatalf("the restarted daemon's admin socket: %v", err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		es, err := c.Entries(context.Background(), admin.EntryFilter{Status: "done", Limit: 1000})
		return err == nil && len(es) == 4*n // 2n accepting entries and their 2n routes'
	}, "every entry done")
	if line := warning(d.Log(), "permission denied"); line != "" {
		t.Errorf("the restarted daemon met a permission error: %s", line)
	}
}
