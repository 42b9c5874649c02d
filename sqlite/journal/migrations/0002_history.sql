-- Bounded storage (SPEC §8.1, issue 35): --history forgets the effects of
-- forgotten entries with their audit events. effect_events stays
-- append-only against any other delete: a row may go only while its scope
-- is listed in forgetting, which the pass fills and empties in the
-- transaction that deletes (journal/history.go).
CREATE TABLE forgetting (scope TEXT PRIMARY KEY) STRICT;
DROP TRIGGER effect_events_no_delete;
CREATE TRIGGER effect_events_no_delete BEFORE DELETE ON effect_events
WHEN NOT EXISTS (SELECT 1 FROM forgetting WHERE scope = OLD.scope)
BEGIN SELECT RAISE(ABORT, 'effect_events is append-only'); END;
