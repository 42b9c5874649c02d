-- issue 28 (pgspeed2): Delivery.FirstLease on PostgreSQL. A run reads its
-- entry's step checkpoints unless its lease is the entry's first (no run
-- started before it, so none can exist): one query per run fewer. The
-- claim sets leased and returns whether it was set before. Entries that
-- exist when this runs count as leased (the stored default of the added
-- column, no rewrite), so none of them skips its checkpoints; new ones
-- start false.
ALTER TABLE touba.entries ADD COLUMN leased BOOLEAN NOT NULL DEFAULT true;
ALTER TABLE touba.entries ALTER COLUMN leased SET DEFAULT false;
