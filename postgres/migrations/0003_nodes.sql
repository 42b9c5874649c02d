-- The node registry (SPEC §8): one row per running node id, its heartbeat
-- under the database's clock. A second node with the same --node-id is
-- refused (NodeIdInUse) while the row's heartbeat is younger than the
-- lease TTL; a dead node's id is free after that (at once when the dead
-- process was on the same host and boot: its pid is gone).
CREATE TABLE nodes (
  node_id      TEXT PRIMARY KEY,
  instance     TEXT NOT NULL,        -- this run of the node (a UUIDv7)
  host         TEXT NOT NULL,
  pid          INTEGER NOT NULL,
  boot_id      TEXT NOT NULL,
  started_at   TIMESTAMPTZ NOT NULL,
  heartbeat_at TIMESTAMPTZ NOT NULL,
  version      TEXT NOT NULL DEFAULT '');
