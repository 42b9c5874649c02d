package postgres

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The batch statements of a run (journal_batch.go: prepare-and-dispatch,
// outcome, end) name their entries by queue id from arrays, so nothing is
// pruned when they are planned, and a cached generic plan locks, opens and
// probes every partition of entries (and of effects) at each execution:
// 120 relation locks for an end of 20 entries on the 90-day layout against
// 30 on a new database and 10 on the partition alone (issue 42). Almost every row of a batch is in one
// time partition, the newest: hotLeaves knows the time partitions' bounds,
// so a batch whose ids all fall in one of them runs its statement against
// that partition's tables directly (a plan of one table and its indexes).
//
// Why that is exact: each of those statements writes a row only where the
// entry is running under the row's lease token, and a row it did not write
// runs its operation's own single-row statements against the parent
// (tx_deferred.go). An entry not in the partition named (moved to
// entries_kept by a pass, or a cache gone stale) is a row not written,
// which the parent's statement then finds. A pass moves every running entry
// of a range out before it detaches the range, and its frozen partitions
// let no entry run again, so a detached partition named by a stale cache
// holds no running entry to match; a dropped one fails the flush (42P01),
// which internal/commit runs again isolated, on the parent. A move to kept
// concurrent with the statement is the serialization failure (40001) the
// parent's statement meets too, which the writer retries.

// hotLeaf is one time partition present in every table the batch
// statements name directly, [from, to) in ms; suffix follows the table's
// name in its partition's ("_p20261203t000000000", "_old").
type hotLeaf struct {
	from, to int64
	suffix   string
}

// hotTables are the partitioned tables the batch statements address by
// partition.
var hotTables = []string{"entries", "effects"}

// hotLeaves caches the time partitions, refreshed in the background (never
// on a writer's path): when older than hotLeavesAge, when an id falls in
// none of them, and when this node changed them (stale).
type hotLeaves struct {
	pool       *pgxpool.Pool
	mu         sync.RWMutex
	list       []hotLeaf // by from
	at         time.Time // when list was read; zero: never, or stale
	tried      time.Time // the last refresh begun
	gen        int64     // stale's count: a read begun before the last stale is not kept
	want       bool      // stale: read again at the next lookup
	refreshing atomic.Bool
	sql        sync.Map // suffix, NUL, statement text -> the statement on the partition (pruned by keep)
}

// hotLeavesAge bounds how long a partition another node added or dropped
// goes unseen (until then its ids take the parent, as without the cache).
const hotLeavesAge = 10 * time.Second

func newHotLeaves(pool *pgxpool.Pool) *hotLeaves { return &hotLeaves{pool: pool} }

// stale makes the next lookup refresh the list: this node created,
// attached, detached or dropped partitions. The list serves meanwhile
// (a refresh waits for one of the pool's connections, which a drain keeps
// busy): a partition it names that is gone fails one batch (gone).
func (h *hotLeaves) stale() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.want = true
	h.gen++
	h.mu.Unlock()
}

// gone drops the list: a batch named a partition no longer there.
func (h *hotLeaves) gone() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.list, h.at, h.want = nil, time.Time{}, true
	h.gen++
	h.mu.Unlock()
}

// suffix is the partition all of ids fall in, "" when none holds them all
// (then the statement runs against the parent).
func (h *hotLeaves) suffix(ids []string) string {
	if h == nil || len(ids) == 0 {
		return ""
	}
	h.mu.RLock()
	list, at, tried, want := h.list, h.at, h.tried, h.want
	h.mu.RUnlock()
	now := time.Now()
	old := now.Sub(at) > hotLeavesAge
	l, ok := find(list, ids[0])
	if want || (old || !ok) && now.Sub(tried) > time.Second {
		h.refresh()
	}
	if !ok || at.IsZero() {
		return ""
	}
	for _, id := range ids[1:] {
		ms, ok := msOf(id)
		if !ok || ms < l.from || ms >= l.to {
			return ""
		}
	}
	return l.suffix
}

// find is the leaf of list holding id.
func find(list []hotLeaf, id string) (hotLeaf, bool) {
	ms, ok := msOf(id)
	if !ok {
		return hotLeaf{}, false
	}
	i := sort.Search(len(list), func(i int) bool { return list[i].to > ms })
	if i < len(list) && list[i].from <= ms {
		return list[i], true
	}
	return hotLeaf{}, false
}

// load reads the partitions now (Open: before the first batch, which a
// refresh behind the busy pool's connections took seconds to serve).
func (h *hotLeaves) load(ctx context.Context) {
	began := time.Now()
	if list, err := readHotLeaves(ctx, h.pool); err == nil {
		h.mu.Lock()
		h.list, h.at, h.tried, h.want = list, began, began, false
		h.mu.Unlock()
		h.keep(list)
	}
}

// keep drops the statements made for partitions list no longer holds: a
// new partition comes every width (every 10 s at the floor), and each
// would otherwise keep its statements for the daemon's life.
func (h *hotLeaves) keep(list []hotLeaf) {
	live := make(map[string]bool, len(list))
	for _, l := range list {
		live[l.suffix] = true
	}
	h.sql.Range(func(k, _ any) bool {
		if suffix, _, _ := strings.Cut(k.(string), "\x00"); !live[suffix] {
			h.sql.Delete(k)
		}
		return true
	})
}

// refresh reads the partitions again in the background, one read at a time.
func (h *hotLeaves) refresh() {
	if !h.refreshing.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	h.tried, h.want = time.Now(), false
	gen := h.gen
	h.mu.Unlock()
	go func() {
		defer h.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		began := time.Now()
		list, err := readHotLeaves(ctx, h.pool)
		if err != nil {
			return // the parent meanwhile; tried again in a second
		}
		h.mu.Lock()
		kept := h.gen == gen
		if kept {
			h.list, h.at = list, began
		} else {
			h.want = true // made stale meanwhile: read again
		}
		h.mu.Unlock()
		if kept {
			h.keep(list)
		}
	}()
}

// readHotLeaves lists the time partitions (and the _old one) every hot
// table has with the same bounds, attached and not being detached: one
// converted table but not the next (an online conversion in progress)
// has none in common.
func readHotLeaves(ctx context.Context, pool *pgxpool.Pool) ([]hotLeaf, error) {
	var common map[string]hotLeaf
	for _, t := range hotTables {
		ls, err := leaves(ctx, pool, t+"_live")
		if err != nil {
			return nil, err
		}
		these := map[string]hotLeaf{}
		for _, l := range ls {
			if l.other || l.pending || !strings.HasPrefix(l.name, t+"_") {
				continue
			}
			s := strings.TrimPrefix(l.name, t)
			if common == nil || common[s] == (hotLeaf{l.from, l.to, s}) {
				these[s] = hotLeaf{l.from, l.to, s}
			}
		}
		common = these
	}
	out := make([]hotLeaf, 0, len(common))
	for _, l := range common {
		out = append(out, l)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].from < out[k].from })
	return out, nil
}

// on is statement sql with each hot table named "touba.<t> <alias>" in it
// read from partition suffix instead (sql itself for "").
func (h *hotLeaves) on(sql, suffix string) string {
	if suffix == "" {
		return sql
	}
	key := suffix + "\x00" + sql
	if s, ok := h.sql.Load(key); ok {
		return s.(string)
	}
	out := sql
	for _, t := range hotTables {
		for _, alias := range []string{" e ", " e\n", " x "} {
			out = strings.ReplaceAll(out, Schema+"."+t+alias, Schema+"."+t+suffix+alias)
		}
	}
	h.sql.Store(key, out)
	return out
}

// undefinedTable tells a statement that named a table no longer there.
func undefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
