-- Held entries counted where they change (issue 43), not read from every
-- held entry: a pending entry is held when its key holds it (held = 1, no
-- hold_on: kind 'key') or when it was handed back on a binding (hold_on:
-- kind 'circuit' when its error_code is CircuitOpen, else 'slot'), as
-- CountByTrigger and HeldRuns always counted them (holdcount.go). The
-- triggers move hold_counts in the statement that changes an entry, so
-- in its transaction; a statement that touches no held entry (a fresh
-- lease, a finish) only has the WHEN clause evaluated. One writer: no
-- row is contended, so no deltas to fold (unlike PostgreSQL's 0018).
--
-- A later migration that rebuilds entries (CREATE, copy, DROP, RENAME)
-- drops these triggers with the old table: it must create them again and
-- recount (TestHeldCountsTriggersKept).
CREATE TABLE hold_counts (
  trigger_ref TEXT NOT NULL,
  hold_on     TEXT NOT NULL, -- '' for kind 'key'
  kind        TEXT NOT NULL,
  n           INTEGER NOT NULL,
  PRIMARY KEY (trigger_ref, hold_on, kind)
) STRICT, WITHOUT ROWID;

INSERT INTO hold_counts (trigger_ref, hold_on, kind, n)
SELECT trigger_ref, COALESCE(hold_on, ''),
  CASE WHEN hold_on IS NULL THEN 'key' WHEN error_code = 'CircuitOpen' THEN 'circuit' ELSE 'slot' END, COUNT(*)
FROM entries WHERE status = 'pending' AND (held = 1 OR hold_on IS NOT NULL) GROUP BY 1, 2, 3;

CREATE TRIGGER hold_count_insert AFTER INSERT ON entries
WHEN NEW.status = 'pending' AND (NEW.held = 1 OR NEW.hold_on IS NOT NULL)
BEGIN
  INSERT INTO hold_counts (trigger_ref, hold_on, kind, n) VALUES (NEW.trigger_ref, COALESCE(NEW.hold_on, ''),
    CASE WHEN NEW.hold_on IS NULL THEN 'key' WHEN NEW.error_code = 'CircuitOpen' THEN 'circuit' ELSE 'slot' END, 1)
    ON CONFLICT (trigger_ref, hold_on, kind) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER hold_count_update AFTER UPDATE ON entries
WHEN (OLD.status = 'pending' AND (OLD.held = 1 OR OLD.hold_on IS NOT NULL) OR NEW.status = 'pending' AND (NEW.held = 1 OR NEW.hold_on IS NOT NULL))
  AND (OLD.status IS NOT NEW.status OR OLD.held IS NOT NEW.held OR OLD.hold_on IS NOT NEW.hold_on
    OR OLD.error_code IS NOT NEW.error_code OR OLD.trigger_ref IS NOT NEW.trigger_ref)
BEGIN
  INSERT INTO hold_counts (trigger_ref, hold_on, kind, n)
    SELECT OLD.trigger_ref, COALESCE(OLD.hold_on, ''),
      CASE WHEN OLD.hold_on IS NULL THEN 'key' WHEN OLD.error_code = 'CircuitOpen' THEN 'circuit' ELSE 'slot' END, -1
    WHERE OLD.status = 'pending' AND (OLD.held = 1 OR OLD.hold_on IS NOT NULL)
    ON CONFLICT (trigger_ref, hold_on, kind) DO UPDATE SET n = n - 1;
  INSERT INTO hold_counts (trigger_ref, hold_on, kind, n)
    SELECT NEW.trigger_ref, COALESCE(NEW.hold_on, ''),
      CASE WHEN NEW.hold_on IS NULL THEN 'key' WHEN NEW.error_code = 'CircuitOpen' THEN 'circuit' ELSE 'slot' END, 1
    WHERE NEW.status = 'pending' AND (NEW.held = 1 OR NEW.hold_on IS NOT NULL)
    ON CONFLICT (trigger_ref, hold_on, kind) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER hold_count_delete AFTER DELETE ON entries
WHEN OLD.status = 'pending' AND (OLD.held = 1 OR OLD.hold_on IS NOT NULL)
BEGIN
  INSERT INTO hold_counts (trigger_ref, hold_on, kind, n) VALUES (OLD.trigger_ref, COALESCE(OLD.hold_on, ''),
    CASE WHEN OLD.hold_on IS NULL THEN 'key' WHEN OLD.error_code = 'CircuitOpen' THEN 'circuit' ELSE 'slot' END, -1)
    ON CONFLICT (trigger_ref, hold_on, kind) DO UPDATE SET n = n - 1;
END;
