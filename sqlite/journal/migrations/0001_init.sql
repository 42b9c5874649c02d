-- touba-effect-journal-v1 (SPEC §5). Table and column names are fixed by the
-- contract; the extra column (owner), the indexes and the triggers are ours.
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
INSERT INTO meta (key, value) VALUES ('format', 'touba-effect-journal-v1');

CREATE TABLE effects (
  scope TEXT NOT NULL, effect_id TEXT NOT NULL, tool_ref TEXT NOT NULL, operation TEXT NOT NULL,
  fingerprint TEXT NOT NULL, retry_mode TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('prepared','dispatched','applied','not_applied','unknown')),
  attempts INTEGER NOT NULL, call_id TEXT, receipt_ref TEXT, result TEXT, error_code TEXT, receipt_error_code TEXT,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  -- owner names the open Journal (one id per Open) that holds a prepared or
  -- dispatched effect; NULL once an outcome is written or after recovery.
  -- It is how a second journal handle on the same file sees that an effect
  -- is in progress elsewhere.
  owner TEXT,
  PRIMARY KEY (scope, effect_id)) STRICT;
CREATE INDEX effects_state ON effects (state, created_at);
CREATE INDEX effects_owner ON effects (owner) WHERE owner IS NOT NULL;

CREATE TABLE effect_events (seq INTEGER PRIMARY KEY, scope TEXT NOT NULL, effect_id TEXT NOT NULL,
  call_id TEXT, state TEXT NOT NULL, at TEXT NOT NULL, detail TEXT) STRICT;
CREATE INDEX effect_events_effect ON effect_events (scope, effect_id, seq);

-- The audit trail is append-only, and an applied effect is never rewritten:
-- the code refuses both, and so does the file, should a bug or a hand-typed
-- UPDATE try.
CREATE TRIGGER effect_events_no_update BEFORE UPDATE ON effect_events
BEGIN SELECT RAISE(ABORT, 'effect_events is append-only'); END;
CREATE TRIGGER effect_events_no_delete BEFORE DELETE ON effect_events
BEGIN SELECT RAISE(ABORT, 'effect_events is append-only'); END;
CREATE TRIGGER effects_applied_final BEFORE UPDATE ON effects WHEN OLD.state = 'applied'
BEGIN SELECT RAISE(ABORT, 'an applied effect is never rewritten'); END;
