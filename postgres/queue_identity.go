package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Identities across partitions (SPEC §3.1, §8.1). A unique index on a
// partitioned table must hold its partition key, so (trigger_ref,
// event_id) is unique within each time partition only (each partition's
// own unique index, which ON CONFLICT DO NOTHING still meets). Across
// them, intake decides under a transaction-level advisory lock of the
// identity: it takes the lock, then (in a later statement, whose snapshot
// sees every entry committed before the lock was free) inserts only where
// no entry of any partition holds the identity. Locks are taken without
// waiting, as a concurrency key's are: a delivery whose identity is
// locked by another transaction is asked again shortly, out of the batch,
// which carries every other delivery (errKeyBusy). An identity leaves
// with its entry's partition: a redelivery after that is a new delivery.
//
// On the unpartitioned tables of a schema not converted yet (nodes of the
// previous release still run), the unique index decides as it always
// did; the lock and the check are then only redundant.

// identityClass is the first key of an identity's lock: the two-key form
// of pg_try_advisory_xact_lock, apart from every one-key lock.
const identityClass = 0x6964 // "id"

// identityKey is the second key: a 32-bit hash of the identity. Two
// identities of one hash wait for each other now and then; nothing else.
func identityKey(ref, eventID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(strconv.Itoa(len(ref)) + ":" + ref + eventID))
	return int32(h.Sum32())
}

// tryLockIdentities takes the locks of keys without waiting and returns
// those held elsewhere.
func tryLockIdentities(ctx context.Context, q querier, keys []int32) (map[int32]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT k FROM (SELECT DISTINCT k FROM unnest($1::int4[]) k) d
		WHERE NOT pg_try_advisory_xact_lock($2, k)`, keys, int32(identityClass))
	if err != nil {
		return nil, fmt.Errorf("lock identities: %w", err)
	}
	busy, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("lock identities: %w", err)
	}
	out := map[int32]bool{}
	for _, k := range busy {
		out[k] = true
	}
	return out, nil
}

// noOtherEntry is the condition under which intake inserts a delivery
// with an event id (columns i.trigger_ref, i.event_id): no entry of any
// partition holds the identity.
const noOtherEntry = `NOT EXISTS (SELECT 1 FROM touba.entries x
	WHERE x.trigger_ref = i.trigger_ref AND x.event_id = i.event_id AND x.event_id <> '')`
