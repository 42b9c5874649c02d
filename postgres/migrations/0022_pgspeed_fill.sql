-- Room on the page for a row's next version (issue 42): every leaf of
-- entries and effects (the table itself before it is partitioned) keeps
-- half of each page free at insert, so that a run's updates of an entry
-- (claim, end) and of an effect (its outcome) write the new version on the
-- same page: a WAL record of the changed columns only, and no lock record
-- for the old version (postgres/leaf_fill.go says why; new leaves get the
-- same, tableSQL). Rows already written keep their pages; only later
-- inserts leave the room.
--
-- Expand only, and online: setting fillfactor takes SHARE UPDATE
-- EXCLUSIVE on each leaf for the transaction, which no read or write
-- waits for, and rewrites nothing. The previous release neither reads nor
-- needs it.
DO $$
DECLARE
  leaf regclass;
BEGIN
  FOR leaf IN SELECT relid FROM pg_partition_tree('touba.entries') WHERE isleaf
    UNION ALL SELECT relid FROM pg_partition_tree('touba.effects') WHERE isleaf
  LOOP
    EXECUTE format('ALTER TABLE %s SET (fillfactor = 50)', leaf);
  END LOOP;
END $$;
