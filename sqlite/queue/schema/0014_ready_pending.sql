-- entries_ready holds pending entries only (issue 45). Every reader of it
-- asks for status = 'pending' (the lease, held listing, the held count);
-- a query over another status already reads entries_status. An entry
-- that is not pending (running, done, failed...) now has no entry here:
-- an accepting trigger's entry stored done at once is one index entry
-- lighter, and so are a lease and a finish (the entry leaves the index
-- instead of moving within it).
--
-- The previous release runs on this schema as it is: its statements name
-- status = 'pending' where they read this index and write it as SQLite
-- maintains any partial index. The rebuild reads the table once, at the
-- upgrade's start.
DROP INDEX entries_ready;
CREATE INDEX entries_ready ON entries (status, held, queue_id) WHERE status = 'pending';
