-- Fewer rows per effect (issue 42): the events an effect's first write
-- records (prepared, and dispatched when both are written at once) are
-- columns of its row, not rows of effect_events: born names them ('p',
-- 'pd'), born_call the call id they carry, created_at their time. Every
-- later event is a row, as before; Journal.Events reads both, the row's
-- first. SPEC §8 fixes the journal's states and rules on PostgreSQL, not
-- its rows; the SQLite file (SPEC §5) is unchanged.
--
-- Expand only: nullable columns (no rewrite); the previous release never
-- reads them, so an effect written by this release shows it the events
-- after the first write only (docs/upgrades.md). born, born_call and
-- created_at are never rewritten, as effect_events rows are never updated.
ALTER TABLE touba.effects ADD COLUMN born TEXT, ADD COLUMN born_call TEXT;
CREATE TRIGGER effects_born_final BEFORE UPDATE ON touba.effects
  FOR EACH ROW WHEN (OLD.born IS DISTINCT FROM NEW.born OR OLD.born_call IS DISTINCT FROM NEW.born_call
    OR OLD.created_at IS DISTINCT FROM NEW.created_at)
  EXECUTE FUNCTION touba.refuse('an effect''s first events are never rewritten');
