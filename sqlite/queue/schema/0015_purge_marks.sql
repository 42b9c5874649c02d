-- The retention pass, bounded (purge.go). A pass read every done entry of
-- the history, in the writer, to find the few that finished past
-- --retention since the last one: at 1,000,000 entries, 245 ms of the
-- writer each hour (issue 42). These tables let a pass read only the queue
-- ids that can hold what became purgeable since the last:
--   purge_marks: for each hour, the lowest queue id of an unfinished entry
--     the samples and revivals of that hour saw ('' for none known).
--   purge_state: the cutoff of the last pass that ended, and when the last
--     pass that read every entry ended.
--   purge_left: bodies a pass found purgeable by age but kept (a wait may
--     still read them): the next pass looks at them again.
-- New tables: the previous release never reads or writes them.
CREATE TABLE purge_marks (
  hour  TEXT PRIMARY KEY,
  floor TEXT NOT NULL
) STRICT;
CREATE TABLE purge_state (
  one     INTEGER PRIMARY KEY CHECK (one = 1),
  cutoff  TEXT NOT NULL,
  full_at TEXT NOT NULL
) STRICT;
CREATE TABLE purge_left (
  queue_id TEXT PRIMARY KEY
) STRICT;
