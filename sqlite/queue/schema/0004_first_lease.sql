-- The lease token of an entry's first lease: a run leased under it is the
-- entry's first, so it has no step checkpoints to read (the dispatcher
-- skips the read). New entries take 1; entries older than this column keep
-- 0, which no lease token equals: their history is unknown, so their runs
-- read their checkpoints.
ALTER TABLE entries ADD COLUMN first_token INTEGER NOT NULL DEFAULT 0;
