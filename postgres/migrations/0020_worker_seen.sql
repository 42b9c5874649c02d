-- Workers that connect out (SPEC §4.3) on several nodes: a worker takes
-- calls from the node it is connected to, so each node records, per worker
-- binding, when one of its workers was last connected to it (a take open,
-- or ended since; written at most every few seconds, postgres/workers.go).
-- `triggers ls` and the console then name a binding with no worker only
-- when no node has had one within 60 s, whichever node they ask.
--
-- Expand only: a new table, which the previous release never reads or
-- writes (it reports its own node's workers, as before).
CREATE TABLE touba.worker_seen (
  tool_ref TEXT NOT NULL,
  node_id  TEXT NOT NULL,
  seen_at  TEXT NOT NULL, -- the database's clock, touba.FormatTime's layout (clock.go)
  PRIMARY KEY (tool_ref, node_id));
