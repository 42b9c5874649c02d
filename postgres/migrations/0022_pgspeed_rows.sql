-- Fewer rows per effect (issue 42): an effect's first outcome is a column
-- of its row, as its first events are since 0019 (born): settled names the outcome's state, settled_call,
-- settled_at and settled_detail its event's call id, time and detail. An
-- outcome goes there when the effect has no effect_events row yet (its
-- first outcome after a prepare-and-dispatch, the common case), else it is
-- a row as before; every later event is a row. So the row's events (born,
-- then settled) come before every row of the effect, and Journal.Events
-- reads them in that order (postgres/journal_born.go). One row and one
-- index entry fewer per effect. SQLite's file (SPEC §5) is unchanged.
--
-- Expand only: nullable columns with no default (no rewrite, on every
-- partition), last in their transaction (ACCESS EXCLUSIVE on effects for
-- an instant, held to the commit). The previous release never reads them,
-- so it shows an effect written by this release without its first outcome
-- event (docs/upgrades.md). Once set they are never rewritten, as an
-- effect_events row is never updated.
ALTER TABLE touba.effects ADD COLUMN settled TEXT, ADD COLUMN settled_call TEXT, ADD COLUMN settled_at TEXT,
  ADD COLUMN settled_detail TEXT;
CREATE TRIGGER effects_settled_final BEFORE UPDATE ON touba.effects
  FOR EACH ROW WHEN (OLD.settled IS NOT NULL AND (OLD.settled IS DISTINCT FROM NEW.settled
    OR OLD.settled_call IS DISTINCT FROM NEW.settled_call OR OLD.settled_at IS DISTINCT FROM NEW.settled_at
    OR OLD.settled_detail IS DISTINCT FROM NEW.settled_detail))
  EXECUTE FUNCTION touba.refuse('an effect''s first outcome is never rewritten');
