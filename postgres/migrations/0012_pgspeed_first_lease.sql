-- issue 28 (pgspeed2): Delivery.FirstLease on PostgreSQL. A run reads its
-- entry's step checkpoints unless its lease is the entry's first (no run
-- started before it, so none can exist): one query per run fewer. The
-- claim sets leased and returns whether it was set before. Entries that
-- exist when this runs count as leased (the stored default of the added
-- column, no rewrite), so none of them skips its checkpoints; new ones
-- start false.
ALTER TABLE touba.entries ADD COLUMN leased BOOLEAN NOT NULL DEFAULT true;
ALTER TABLE touba.entries ALTER COLUMN leased SET DEFAULT false;
-- A binary from before this migration inserts entries with the new
-- default, false, and leases them without setting it: a later lease by a
-- binary that knows it would take such an entry's run for its first and
-- skip the checkpoints that run wrote. So no binary that does not know
-- this migration may run on the schema once it is applied.
-- touba:oldest-compatible 0012_pgspeed_first_lease.sql
