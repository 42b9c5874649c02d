-- Flow control across nodes (SPEC §2.1 concurrency, §2.2 max_concurrency).

-- A binding's max_concurrency slots, shared by every node. A row is a slot
-- some entry's lease took (queue_id under lease_token); the slot is free
-- when there is no row or that lease is no longer live (the entry left
-- running, or its lease expired: its node died), so a crashed node never
-- keeps a slot. Slots are numbered 1..max; rows exist only once taken.
CREATE TABLE binding_slots (
  tool_ref    TEXT NOT NULL,
  slot        INTEGER NOT NULL,
  queue_id    TEXT NOT NULL,
  lease_token BIGINT NOT NULL,
  node_id     TEXT NOT NULL,
  taken_at    TEXT NOT NULL,
  PRIMARY KEY (tool_ref, slot));

-- The order of a key's entries: drawn from conc_seqs under the key's
-- advisory lock at enqueue, so it is the order in which the key's entries
-- were accepted, whichever node accepted them. queue_id (a UUIDv7 from the
-- accepting node's clock) is not: two nodes' clocks differ, and two ids of
-- one millisecond from two processes sort at random.
CREATE SEQUENCE conc_seqs;
ALTER TABLE entries ADD COLUMN conc_seq BIGINT;
UPDATE entries e SET conc_seq = o.n
  FROM (SELECT queue_id, row_number() OVER (ORDER BY queue_id) AS n FROM entries WHERE conc_key IS NOT NULL) o
  WHERE e.queue_id = o.queue_id;
SELECT setval('conc_seqs', COALESCE((SELECT MAX(conc_seq) FROM entries), 0) + 1, false);
DROP INDEX entries_key;
CREATE INDEX entries_key ON entries (trigger_ref, conc_key, conc_seq)
  WHERE conc_key IS NOT NULL AND status IN ('pending', 'running', 'parked');
