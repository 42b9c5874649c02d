-- Held entries counted where they change (issue 43), not by a GROUP BY of
-- every held entry each second: a pending entry is held when its key
-- holds it (held, no hold_on: kind 'key') or when it was handed back on a
-- binding (hold_on: kind 'circuit' when its error_code is CircuitOpen,
-- else 'slot'), as CountByTrigger and HeldRuns always counted them.
--
-- Every change of an entry into, out of or between those states adds a
-- row of +1/-1 to hold_deltas, in the transaction that made it, by the
-- triggers below: whatever statement does it, this release's, the
-- previous release's during a rolling upgrade, or a later one's. A
-- statement that touches no held entry (a fresh lease, a finish) only
-- has the WHEN clause evaluated: no function call, no row. hold_deltas is
-- insert-only and unindexed, so there is no row every lease updates; a
-- node folds it into hold_counts each second under an advisory lock, and
-- recounts hold_counts from the entries at start-up and every few
-- minutes, which corrects what no trigger saw (rows of a table attached
-- again, writes with session_replication_role = replica).
-- Readers sum both tables in one snapshot (postgres/queue_holdcount.go).
CREATE TABLE touba.hold_deltas (
  trigger_ref TEXT NOT NULL,
  hold_on     TEXT NOT NULL, -- '' for kind 'key'
  kind        TEXT NOT NULL,
  n           INTEGER NOT NULL
);
CREATE TABLE touba.hold_counts (
  trigger_ref TEXT NOT NULL,
  hold_on     TEXT NOT NULL,
  kind        TEXT NOT NULL,
  n           BIGINT NOT NULL,
  PRIMARY KEY (trigger_ref, hold_on, kind)
);

CREATE FUNCTION touba.hold_kind(hold_on TEXT, error_code TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE
  AS $$ SELECT CASE WHEN hold_on IS NULL THEN 'key' WHEN error_code = 'CircuitOpen' THEN 'circuit' ELSE 'slot' END $$;

CREATE FUNCTION touba.count_holds() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  was BOOLEAN := TG_OP <> 'INSERT' AND OLD.status = 'pending' AND (OLD.held OR OLD.hold_on IS NOT NULL);
  is_held BOOLEAN := TG_OP <> 'DELETE' AND NEW.status = 'pending' AND (NEW.held OR NEW.hold_on IS NOT NULL);
BEGIN
  IF was AND is_held AND OLD.trigger_ref = NEW.trigger_ref AND OLD.hold_on IS NOT DISTINCT FROM NEW.hold_on
     AND touba.hold_kind(OLD.hold_on, OLD.error_code) = touba.hold_kind(NEW.hold_on, NEW.error_code) THEN
    RETURN NULL;
  END IF;
  IF was THEN
    INSERT INTO touba.hold_deltas VALUES (OLD.trigger_ref, COALESCE(OLD.hold_on, ''), touba.hold_kind(OLD.hold_on, OLD.error_code), -1);
  END IF;
  IF is_held THEN
    INSERT INTO touba.hold_deltas VALUES (NEW.trigger_ref, COALESCE(NEW.hold_on, ''), touba.hold_kind(NEW.hold_on, NEW.error_code), 1);
  END IF;
  RETURN NULL;
END $$;

-- One trigger per event: a WHEN clause may name OLD only on UPDATE and
-- DELETE, NEW only on INSERT and UPDATE. On the partitioned table (once
-- converted) they are every partition's; a row moved between partitions
-- (to kept) is a DELETE and an INSERT, -1 and +1.
CREATE TRIGGER hold_count_insert AFTER INSERT ON touba.entries FOR EACH ROW
  WHEN (NEW.status = 'pending' AND (NEW.held OR NEW.hold_on IS NOT NULL))
  EXECUTE FUNCTION touba.count_holds();
CREATE TRIGGER hold_count_update AFTER UPDATE ON touba.entries FOR EACH ROW
  WHEN ((OLD.status = 'pending' AND (OLD.held OR OLD.hold_on IS NOT NULL) OR NEW.status = 'pending' AND (NEW.held OR NEW.hold_on IS NOT NULL))
    AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.held IS DISTINCT FROM NEW.held OR OLD.hold_on IS DISTINCT FROM NEW.hold_on
      OR OLD.error_code IS DISTINCT FROM NEW.error_code OR OLD.trigger_ref IS DISTINCT FROM NEW.trigger_ref))
  EXECUTE FUNCTION touba.count_holds();
CREATE TRIGGER hold_count_delete AFTER DELETE ON touba.entries FOR EACH ROW
  WHEN (OLD.status = 'pending' AND (OLD.held OR OLD.hold_on IS NOT NULL))
  EXECUTE FUNCTION touba.count_holds();
