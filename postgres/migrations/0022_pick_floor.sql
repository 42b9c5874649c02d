-- The lease's floor (postgres/queue_floor.go): a queue id at or below that
-- of every entry a lease can pick (pending, running, waiting) in the time
-- partitions of entries, so that the picks name it as a constant and the
-- planner leaves out the partitions wholly below it (issue 42: the picks
-- read every partition's index and locked every partition, so a lease
-- cost more the longer the history). One row. NULL until a node first
-- computes it: the picks are then unbounded, as before.
--
-- Expand only: a new table the previous release never reads or writes. A
-- node of the previous release that replays or resumes an entry below the
-- floor does not lower it; the next raise (every 10 s on each node of
-- this release) reads the entries and lowers it.
CREATE TABLE touba.pick_floor (
  one   BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
  floor TEXT);
INSERT INTO touba.pick_floor (one, floor) VALUES (true, NULL);
