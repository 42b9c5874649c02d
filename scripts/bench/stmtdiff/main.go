// Command stmtdiff compares what two drains spent statement by statement:
// where the database's time went on one layout and not on the other. Its
// inputs are the files `scripts/bench-pg` writes under STMTS=DIR, one per
// touba run: pg_stat_statements of the drain's database (calls, planning
// and execution ms, the query), tab-separated.
//
//	stmtdiff [-n 20] A.tsv B.tsv
//
// The same statement has another text (so another queryid) on each layout
// when it names a partition or carries a bound as a constant, so the
// statements are matched by their text with partition names, constants and
// parameter numbers blotted out, and the rows of one key are summed. The
// output lists the keys by how much more (or less) time B spent on them
// than A, planning and execution apart, then the totals.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// spent is one key's sum in one drain.
type spent struct {
	calls      int64
	plan, exec float64 // ms
}

func (s spent) total() float64 { return s.plan + s.exec }

func (s spent) add(o spent) spent { return spent{s.calls + o.calls, s.plan + o.plan, s.exec + o.exec} }

var (
	leafName = regexp.MustCompile(`_(?:p\d{8}t\d{9}|old)\b`) // a time partition, or the one before them (a new database's only)
	literal  = regexp.MustCompile(`'(?:[^']|'')*'`)
	param    = regexp.MustCompile(`\$\d+`)
	spaces   = regexp.MustCompile(`\s+`)
)

// key is the statement's text with what differs between layouts blotted
// out (the partition a batch statement names, the floor's bound): two
// statements of one key are the same code's.
func key(query string) string {
	q := spaces.ReplaceAllString(query, " ")
	q = leafName.ReplaceAllString(q, "_pX")
	q = literal.ReplaceAllString(q, "'…'")
	return param.ReplaceAllString(q, "$")
}

// load reads one STMTS file: calls, planning ms, execution ms, query.
func load(path string) (map[string]spent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]spent{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		col := strings.SplitN(sc.Text(), "\t", 4)
		if len(col) != 4 {
			return nil, fmt.Errorf("%s:%d: want calls, plan ms, exec ms, query", path, n)
		}
		calls, err1 := strconv.ParseInt(col[0], 10, 64)
		plan, err2 := strconv.ParseFloat(col[1], 64)
		exec, err3 := strconv.ParseFloat(col[2], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%s:%d: a number is not one", path, n)
		}
		k := key(col[3])
		out[k] = out[k].add(spent{calls, plan, exec})
	}
	return out, sc.Err()
}

// row is one key in both drains.
type row struct {
	key  string
	a, b spent
}

// diff is the size of B's difference from A on the key, either way.
func (r row) diff() float64 { return math.Abs(r.b.total() - r.a.total()) }

// compare lists every key of either drain, the largest difference first.
func compare(a, b map[string]spent) []row {
	var out []row
	for k, s := range a {
		out = append(out, row{k, s, b[k]})
	}
	for k, s := range b {
		if _, ok := a[k]; !ok {
			out = append(out, row{k, spent{}, s})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if di, dj := out[i].diff(), out[j].diff(); di != dj {
			return di > dj
		}
		return out[i].key < out[j].key
	})
	return out
}

func main() {
	log.SetFlags(0)
	n := flag.Int("n", 20, "keys listed")
	flag.Parse()
	if flag.NArg() != 2 {
		log.Fatal("usage: stmtdiff [-n 20] A.tsv B.tsv")
	}
	a, err := load(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	b, err := load(flag.Arg(1))
	if err != nil {
		log.Fatal(err)
	}
	rows := compare(a, b)
	fmt.Printf("%9s  %13s  %17s  %19s  %s\n", "B-A ms", "calls A/B", "plan ms A/B", "exec ms A/B", "statement")
	var ta, tb spent
	for i, r := range rows {
		ta, tb = ta.add(r.a), tb.add(r.b)
		if i < *n {
			q := []rune(r.key) // a blotted constant is '…', which a byte cut could split
			if len(q) > 110 {
				q = q[:110]
			}
			fmt.Printf("%9.1f  %6d/%-6d  %8.1f/%-8.1f  %9.1f/%-9.1f  %s\n", r.b.total()-r.a.total(),
				r.a.calls, r.b.calls, r.a.plan, r.b.plan, r.a.exec, r.b.exec, string(q))
		}
	}
	fmt.Printf("%9.1f  %6d/%-6d  %8.1f/%-8.1f  %9.1f/%-9.1f  (all %d statements)\n", tb.total()-ta.total(),
		ta.calls, tb.calls, ta.plan, tb.plan, ta.exec, tb.exec, len(rows))
}
