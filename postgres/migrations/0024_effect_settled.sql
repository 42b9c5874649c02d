-- One row per effect (issue 42): an effect's outcome (applied, not_applied
-- or unknown, as the run that called it records it) is kept in columns of
-- its row, as 0019 keeps its first events, not as an effect_events row,
-- when the row holds none yet: settled names its state, settled_call the
-- call id it carries, settled_at its time, settled_detail its detail, and
-- settled_seq its place among the effect's event rows (a value of their
-- own sequence, taken when it is written, so that Journal.Events orders
-- the two by seq exactly as the rows alone were ordered). Every later
-- outcome, and one written another way (a fence that failed, a
-- take-over's unknown), is a row, as before. SPEC §8 fixes the journal's
-- states and rules on PostgreSQL, not its rows; the SQLite file (SPEC §5)
-- is unchanged.
--
-- Expand only: nullable columns (no rewrite); the previous release never
-- reads them, so an effect this release settled shows it no outcome event
-- (its state, result and rules are the row's, as before; docs/upgrades.md).
-- Once written, the columns are never rewritten, as effect_events rows are
-- never updated.
ALTER TABLE touba.effects ADD COLUMN settled TEXT, ADD COLUMN settled_call TEXT, ADD COLUMN settled_at TEXT,
  ADD COLUMN settled_detail TEXT, ADD COLUMN settled_seq BIGINT;
CREATE TRIGGER effects_settled_final BEFORE UPDATE ON touba.effects
  FOR EACH ROW WHEN (OLD.settled_seq IS NOT NULL AND (OLD.settled, OLD.settled_call, OLD.settled_at, OLD.settled_detail,
    OLD.settled_seq) IS DISTINCT FROM (NEW.settled, NEW.settled_call, NEW.settled_at, NEW.settled_detail, NEW.settled_seq))
  EXECUTE FUNCTION touba.refuse('an effect''s kept outcome is never rewritten');
