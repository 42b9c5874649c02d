-- Bounded storage (SPEC §8.1, issue 35), the expand step: what a node of
-- this release needs on today's unpartitioned tables, and what lets the
-- partitioning (postgres/partition*.go) be done later, online, once no
-- node of an older release runs. Nothing here changes what the previous
-- release reads or writes: columns with constant defaults (no rewrite),
-- functions, and the audit triggers recreated with the same refusals;
-- one table a transaction, so that no table the previous release writes
-- stays locked while the next one's lock is waited for.

-- The newest migration each node knows: the partitioning waits until every
-- live node knows this one (a node of the previous release leaves it '').
ALTER TABLE touba.nodes ADD COLUMN migration TEXT NOT NULL DEFAULT '';
-- touba:commit

-- kept: a row moved out of its time partition because --history must not
-- forget it (a failed, parked or unfinished entry, one with an effect not
-- settled, an offer still awaited), with everything of its entry. Once
-- partitioned, kept is the first level of the partitioning (LIST): kept
-- rows live in <table>_kept, the others in time partitions.
ALTER TABLE touba.entries ADD COLUMN kept BOOLEAN NOT NULL DEFAULT false;
-- touba:commit
ALTER TABLE touba.runs ADD COLUMN kept BOOLEAN NOT NULL DEFAULT false;
-- touba:commit
ALTER TABLE touba.run_steps ADD COLUMN kept BOOLEAN NOT NULL DEFAULT false;
-- touba:commit

-- A run, checkpoint, effect or event of a kept entry is inserted kept, so
-- it never lands in a time partition being forgotten.
CREATE FUNCTION touba.entry_kept(qid TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE
  AS $$ SELECT EXISTS (SELECT 1 FROM touba.entries WHERE queue_id = qid AND kept) $$;

-- The audit trail stays append-only and an applied effect final, but for
-- the move of a row to the kept partition (an UPDATE that sets kept and
-- nothing else, whose row movement deletes the old version) and the
-- deletes of a --history pass, which sets touba.history for its own
-- transaction only.
CREATE FUNCTION touba.only_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.kept AND NOT OLD.kept AND to_jsonb(NEW) - 'kept' = to_jsonb(OLD) - 'kept' THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' AND current_setting('touba.history', true) = 'on' THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION '%', TG_ARGV[0];
END $$;
ALTER TABLE touba.effect_events ADD COLUMN kept BOOLEAN NOT NULL DEFAULT false;
DROP TRIGGER effect_events_append_only ON touba.effect_events;
CREATE TRIGGER effect_events_append_only BEFORE UPDATE OR DELETE ON touba.effect_events
  FOR EACH ROW EXECUTE FUNCTION touba.only_history('effect_events is append-only');
-- touba:commit

-- A time partition being forgotten takes no new row and no entry of it
-- runs again: the pass has moved what must stay, and what is left goes
-- whole. Attached to those partitions only (postgres/history_forget.go).
CREATE FUNCTION touba.forgetting() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NEW.kept AND NOT OLD.kept THEN
      RETURN NEW;
    END IF;
    IF TG_TABLE_NAME LIKE 'entries%' AND OLD.status IN ('done', 'cancelled', 'merged')
       AND NEW.status NOT IN ('done', 'cancelled', 'merged') THEN
      RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format('HistoryForgetting: entry %s is past --history and being forgotten', OLD.queue_id);
    END IF;
    RETURN NEW;
  END IF;
  RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format('HistoryForgetting: partition %s is past --history and being forgotten', TG_TABLE_NAME);
END $$;

-- Last, then the commit: the lock on effects is held to it.
ALTER TABLE touba.effects ADD COLUMN kept BOOLEAN NOT NULL DEFAULT false;
DROP TRIGGER effects_applied_final ON touba.effects;
CREATE TRIGGER effects_applied_final BEFORE UPDATE ON touba.effects
  FOR EACH ROW WHEN (OLD.state = 'applied') EXECUTE FUNCTION touba.only_history('an applied effect is never rewritten');
