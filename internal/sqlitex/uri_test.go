package sqlitex

import (
	"os"
	"path/filepath"
	"testing"
)

// A path holding the characters an SQLite URI gives a meaning to ('?',
// '#', '%') opens that file, not a file named by the path's prefix.
func TestOpenPathWithURICharacters(t *testing.T) {
	for _, name := range []string{"a#1", "a?b=c", "a%23b", "a%"} {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "q.sqlite")
		db, err := Open(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := db.Write.Exec(`CREATE TABLE t (x INTEGER)`); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		db.Close()
		st, err := os.Stat(path)
		if err != nil || st.Size() == 0 {
			t.Fatalf("%s: the database is not at %s (%v)", name, path, err)
		}
		ro, err := OpenReadOnly(path)
		if err != nil {
			t.Fatalf("%s read-only: %v", name, err)
		}
		var n int
		if err := ro.Read.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 't'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s read-only: table t %d (%v)", name, n, err)
		}
		ro.Close()
	}
}
