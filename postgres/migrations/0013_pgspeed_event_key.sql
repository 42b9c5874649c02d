-- issue 28 (pgspeed3): one index on the effects' audit events instead of
-- two. Every read of effect_events is by (scope, effect_id) in seq order
-- (effect_events_effect); the primary key on seq alone was an index entry
-- more for each of an effect's three events and read by nothing. The
-- primary key becomes (scope, effect_id, seq), unique since seq is.
--
-- Issue 33: the unique index is built online. A plain CREATE INDEX in the
-- migration's transaction held SHARE on effect_events, which every node's
-- journal insert waits for, for the whole build (and past its 10-minute
-- statement timeout on a large journal). The primary key then takes the
-- built index over (a catalog change: its ACCESS EXCLUSIVE lock is held
-- for an instant), and the index it replaces is dropped online.
-- touba:online
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS effect_events_key ON touba.effect_events (scope, effect_id, seq);
-- touba:transaction
ALTER TABLE touba.effect_events DROP CONSTRAINT effect_events_pkey,
  ADD CONSTRAINT effect_events_pkey PRIMARY KEY USING INDEX effect_events_key;
-- touba:online
DROP INDEX CONCURRENTLY IF EXISTS touba.effect_events_effect;
