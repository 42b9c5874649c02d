package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKeyMatchesOneStatementAcrossLayouts(t *testing.T) {
	newDB := "UPDATE touba.entries_old e SET status = $3\n\tWHERE e.queue_id >= '01a24fab-fe7a-0000' AND x = $12"
	history := "UPDATE touba.entries_p20261207t054500000 e SET status = $4 WHERE e.queue_id >= '01a24fac-6822-0000' AND x = $1"
	if key(newDB) != key(history) {
		t.Fatalf("one statement, two keys:\n%s\n%s", key(newDB), key(history))
	}
	if other := "UPDATE touba.entries_other e SET status = $3 WHERE e.queue_id >= 'x' AND x = $1"; key(other) == key(history) {
		t.Fatalf("the partition of ids past the time partitions is not a time partition: %s", key(other))
	}
}

func TestCompareSumsAndOrders(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, err := load(write("a.tsv", "10\t1.0\t20.0\tSELECT 1 FROM touba.runs_old\n5\t0.5\t1.0\tSELECT 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := load(write("b.tsv", "4\t2.0\t10.0\tSELECT 1 FROM touba.runs_p20261207t054500000\n"+
		"6\t1.0\t12.0\tSELECT 1 FROM touba.runs_p20261208t032230000\n1\t40.0\t0.0\tSELECT 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	rows := compare(a, b)
	if len(rows) != 3 {
		t.Fatalf("%d keys, want 3: %+v", len(rows), rows)
	}
	if rows[0].key != "SELECT 3" || rows[0].a.calls != 0 || rows[0].b.plan != 40 {
		t.Fatalf("first %+v, want the statement only B ran, 40 ms", rows[0])
	}
	if r := rows[1]; r.a.calls != 10 || r.b.calls != 10 || r.b.exec != 22 || r.b.plan != 3 {
		t.Fatalf("second %+v, want B's two partitions summed against A's one", r)
	}
	if _, err := load(write("bad.tsv", "x\t1\t2\tSELECT\n")); err == nil {
		t.Fatal("a file with a count that is not a number loaded")
	}
}
