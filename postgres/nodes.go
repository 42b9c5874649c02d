package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// register claims the node id in touba.nodes: refused (NodeIdInUse) while
// another run of it has a heartbeat younger than the lease TTL by the
// database's clock, unless that run was a process of this host and boot
// that is gone.
func (d *db) register(ctx context.Context) error {
	host, _ := os.Hostname()
	boot := bootID()
	d.instance = newID()
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	return pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{BeginQuery: d.begin}, func(tx pgx.Tx) error {
		var oHost, oBoot string
		var oPid int
		var age float64
		err := tx.QueryRow(ctx, `SELECT host, pid, boot_id, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8
			FROM touba.nodes WHERE node_id = $1 FOR UPDATE`, d.cfg.NodeID).Scan(&oHost, &oPid, &oBoot, &age)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("node registry: %w", err)
		}
		if err == nil && age < d.cfg.LeaseTTL.Seconds() && !(oHost == host && oBoot == boot && gone(oPid)) {
			return touba.Errorf(touba.ENodeIdInUse, "--node-id %q is in use by pid %d on %s (its last heartbeat %.1fs ago, "+
				"by the database's clock); two nodes may not share an id; it is free %s after that node stopped",
				d.cfg.NodeID, oPid, oHost, age, d.cfg.LeaseTTL)
		}
		// migration: what this binary knows, so that the partitioning
		// (history_partition_convert.go) waits for nodes of older releases.
		_, err = tx.Exec(ctx, `INSERT INTO touba.nodes (node_id, instance, host, pid, boot_id, started_at, heartbeat_at, migration)
			VALUES ($1, $2, $3, $4, $5, now(), now(), $6)
			ON CONFLICT (node_id) DO UPDATE SET instance = EXCLUDED.instance, host = EXCLUDED.host, pid = EXCLUDED.pid,
				boot_id = EXCLUDED.boot_id, started_at = now(), heartbeat_at = now(), migration = EXCLUDED.migration`,
			d.cfg.NodeID, d.instance, host, os.Getpid(), boot, newestMigration())
		if err != nil {
			return fmt.Errorf("node registry: %w", err)
		}
		return nil
	})
}

// heartbeat renews the node's row every third of the lease TTL until
// stop closes, then removes the row (a clean stop frees the id at once).
func (d *db) heartbeat(stop <-chan struct{}) {
	t := time.NewTicker(max(d.cfg.LeaseTTL/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeout)
			d.pool.Exec(ctx, `DELETE FROM touba.nodes WHERE node_id = $1 AND instance = $2`, d.cfg.NodeID, d.instance)
			cancel()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeout)
		tag, err := d.pool.Exec(ctx, `UPDATE touba.nodes SET heartbeat_at = now() WHERE node_id = $1 AND instance = $2`,
			d.cfg.NodeID, d.instance)
		cancel()
		if err == nil && tag.RowsAffected() == 0 {
			d.log.Error().Str("node_id", d.cfg.NodeID).
				Msg("node registry: another run of this --node-id took it over (this node was cut off past --lease-ttl)")
		}
	}
}

// bootID is the kernel's boot id ("" when unknown).
func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// gone tells whether no process pid exists (on this host).
func gone(pid int) bool {
	if pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
