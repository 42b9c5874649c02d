package powerloss_test

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"
	"github.com/touba/touba-trigger/internal/gobuild"
)

// TestLazyFSDropsUnsyncedWrites checks the model the power-loss test stands
// on: a process reads its own unsynced writes and truncates, an fsync makes
// them durable, and a cut loses exactly what was not synced.
func TestLazyFSDropsUnsyncedWrites(t *testing.T) {
	d := newDisk(t)
	f, err := os.OpenFile(d.path("f"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	synced := bytes.Repeat([]byte("s"), 10000)
	if _, err := f.WriteAt(synced, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Unsynced: a truncate down, then a write past the old end, which must
	// read as zeros in between (not the truncated bytes).
	if err := f.Truncate(100); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("late"), 12000); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{}, synced[:100]...), make([]byte, 11900)...), "late"...)
	if got, err := os.ReadFile(d.path("f")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read before the cut: %d bytes (%v), want %d: own writes must be seen", len(got), err, len(want))
	}
	if got, _ := os.ReadFile(d.onDisk("f")); !bytes.Equal(got, synced) {
		t.Fatalf("the disk has %d bytes before any fsync of the new writes, want the %d synced", len(got), len(synced))
	}
	f.Close()
	d.cut()
	if got, err := os.ReadFile(d.path("f")); err != nil || !bytes.Equal(got, synced) {
		t.Fatalf("after the cut: %d bytes (%v), want the %d synced ones", len(got), err, len(synced))
	}

	// Synced this time: the cut keeps it.
	f, err = os.OpenFile(d.path("f"), os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("kept"), 5); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d.cut()
	if got, _ := os.ReadFile(d.path("f")); !bytes.Equal(got, []byte("\x00\x00\x00\x00\x00kept")) {
		t.Fatalf("after a synced O_TRUNC and write and a cut: %q", got)
	}
}

// TestLazyFSRunsSQLiteWAL checks that SQLite in WAL mode (which maps its
// -shm file) works on the mount, and that what a process killed with
// SIGKILL committed with synchronous=FULL survives a cut while what it
// committed with synchronous=OFF does not.
func TestLazyFSRunsSQLiteWAL(t *testing.T) {
	d := newDisk(t)
	db := d.path("t.sqlite")
	for _, c := range []struct {
		sync string
		want int
	}{{"FULL", 10}, {"OFF", 10}, {"FULL", 20}} {
		insertAndDie(t, db, c.sync, 10)
		d.cut()
		if got := countRows(t, db); got != c.want {
			t.Fatalf("after 10 rows committed with synchronous=%s and a cut: %d rows, want %d", c.sync, got, c.want)
		}
	}
}

// sqliteChildEnv makes the test binary a child that inserts rows and waits
// to be killed: "path,synchronous,rows".
const sqliteChildEnv = "POWERLOSS_SQLITE_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(sqliteChildEnv); spec != "" {
		os.Exit(sqliteChild(spec))
	}
	if spec := os.Getenv(lazyfsEnv); spec != "" {
		os.Exit(serveLazyFS(spec))
	}
	gobuild.Main(m, nil)
}

// sqliteChild inserts the rows, says "done" and blocks until killed.
func sqliteChild(spec string) int {
	parts := strings.Split(spec, ",")
	n, _ := strconv.Atoi(parts[2])
	db, err := sql.Open("sqlite3", "file:"+parts[0]+"?_journal_mode=WAL&_synchronous="+parts[1])
	if err == nil {
		_, err = db.Exec(`CREATE TABLE IF NOT EXISTS t (v INTEGER)`)
	}
	for i := 0; err == nil && i < n; i++ {
		_, err = db.Exec(`INSERT INTO t VALUES (?)`, i)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("done")
	select {}
}

// insertAndDie runs sqliteChild and kills it with SIGKILL once it is done.
func insertAndDie(t *testing.T, path, sync string, rows int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d", sqliteChildEnv, path, sync, rows))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if line != "done\n" {
		t.Fatalf("sqlite child: %q", line)
	}
}

// countRows counts t's rows, opening the file after a cut.
func countRows(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	var mode, ok string
	if err := db.QueryRow(`SELECT COUNT(*), (SELECT journal_mode FROM pragma_journal_mode),
		(SELECT integrity_check FROM pragma_integrity_check) FROM t`).Scan(&n, &mode, &ok); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || ok != "ok" {
		t.Fatalf("journal_mode %q, integrity_check %q; want wal, ok", mode, ok)
	}
	return n
}
