-- The retention pass, bounded (postgres/queue_purge.go). A pass read every
-- done entry of the history to find the few that finished past
-- --retention since the last one: at 90 days and the hourly pass the
-- defaults choose, each entry was read about 2,000 times over its life
-- (issue 42). These tables let a pass read only the range of queue ids
-- that can hold what became purgeable since the last:
--   purge_marks: for each hour, the lowest lease floor of that hour (as
--     the raises and the revivals of this release set it); '' for none.
--   purge_state: the cutoff of the last pass that ended, and when the last
--     pass that read every entry ended.
--   purge_left: bodies a pass found purgeable by age but kept (a wait may
--     still read them) or locked: the next pass looks at them again.
-- Expand only: new tables the previous release never reads or writes. A
-- pass without the marks it needs reads every entry, as before.
CREATE TABLE touba.purge_marks (
  hour  TEXT PRIMARY KEY,
  floor TEXT NOT NULL);
CREATE TABLE touba.purge_state (
  one     BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
  cutoff  TEXT NOT NULL,
  full_at TEXT NOT NULL);
CREATE TABLE touba.purge_left (
  queue_id TEXT PRIMARY KEY);
