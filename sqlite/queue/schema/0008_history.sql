-- Bounded storage (SPEC §8.1, issue 35): --history forgets finished entries
-- accepted longer ago than the window.

-- The finished entries by acceptance: a pass reads the oldest through
-- this, whatever the size of the rest of the queue. Entries enter it when
-- they finish, never at intake.
CREATE INDEX entries_finished ON entries (received_at, queue_id) WHERE status IN ('done', 'cancelled', 'merged');

-- Entries deleted from this file whose runs and checkpoints (state file)
-- and effects (journal) are not deleted yet: the three files commit apart,
-- so a pass deletes the entry first (nothing can run it again) and the
-- rest after, and a crash in between leaves these ids for the next pass.
-- No effect is ever forgotten while its entry could still be replayed.
CREATE TABLE forgotten (
  queue_id TEXT PRIMARY KEY
) STRICT;
