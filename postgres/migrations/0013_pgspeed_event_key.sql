-- issue 28 (pgspeed3): one index on the effects' audit events instead of
-- two. Every read of effect_events is by (scope, effect_id) in seq order
-- (effect_events_effect); the primary key on seq alone was an index entry
-- more for each of an effect's three events and read by nothing. The
-- primary key becomes (scope, effect_id, seq), unique since seq is.
CREATE UNIQUE INDEX effect_events_key ON touba.effect_events (scope, effect_id, seq);
ALTER TABLE touba.effect_events DROP CONSTRAINT effect_events_pkey,
  ADD CONSTRAINT effect_events_pkey PRIMARY KEY USING INDEX effect_events_key;
DROP INDEX touba.effect_events_effect;
