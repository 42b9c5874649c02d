-- Operator actions' claims on an entry (admin/busy.go), shared by every
-- node and the CLI: a compensation, a replay or a resolve that resumes an
-- entry claims it before checking its status and holds it to its end, so
-- two of them, on two nodes, never work on one entry at once. A claim
-- left by a process that died expires (expires_at, the database's clock).
CREATE TABLE operator_claims (
  queue_id   TEXT PRIMARY KEY,
  what       TEXT NOT NULL,
  node       TEXT NOT NULL,
  instance   TEXT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL);
