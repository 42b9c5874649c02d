package testkit

import (
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
)

func TestMain(m *testing.M) { gobuild.Main(m, nil) }

// A daemon that exits before it listens (here: a program file that does
// not exist) is handed back by StartMayDie, for the test to Wait on,
// where Start would fail the test.
func TestStartMayDieReturnsADaemonThatExitedFirst(t *testing.T) {
	d := StartMayDie(t, nil, "serve", t.TempDir()+"/missing.air.json", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", "")
	if d.Addr != "" {
		t.Fatalf("listening at %s on a program that does not exist", d.Addr)
	}
	if code := d.Wait(10 * time.Second); code == 0 {
		t.Fatalf("exit code 0, want the failure's\n%s", d.Log())
	}
}
