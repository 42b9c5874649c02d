-- Fair dispatch (SPEC §2.2 "Holds take nothing"): a run that meets a
-- binding with no free max_concurrency slot or an open circuit is handed
-- back pending with held = 1 (so no trigger's lease index holds it) and
-- hold_on naming the binding; only a lease's ask for that hold takes it
-- again. The key's own hold (held without hold_on) is untouched by it.
ALTER TABLE entries ADD COLUMN hold_on TEXT;
CREATE INDEX entries_hold ON entries (hold_on, queue_id) WHERE status = 'pending' AND hold_on IS NOT NULL;
