-- Room on the page for a row's next version (issue 42): every leaf of
-- entries and effects (the table itself before it is partitioned) keeps
-- half of each page free at insert, so that a run's updates of an entry
-- (claim, end) and of an effect (its outcome) write the new version on the
-- same page: a WAL record of the changed columns only, and no lock record
-- for the old version (postgres/leaf_fill.go says why; new leaves get the
-- same, tableSQL). Rows already written keep their pages; only later
-- inserts leave the room. 0010 gave entries 80 for its HOT lease
-- extension; the time partitions, created LIKE entries, lost it.
--
-- Expand only, and online: setting fillfactor takes SHARE UPDATE
-- EXCLUSIVE on each leaf for the transaction, which no read or write
-- waits for, and rewrites nothing. The previous release neither reads nor
-- needs it.
DO $$
DECLARE
  leaf regclass;
BEGIN
  -- pg_partition_tree lists nothing for a table not partitioned yet.
  FOR leaf IN SELECT t.relid FROM unnest(ARRAY['touba.entries'::regclass, 'touba.effects'::regclass]) AS r(rel),
      LATERAL (SELECT r.rel AS relid WHERE (SELECT relkind FROM pg_class WHERE oid = r.rel) = 'r'
        UNION ALL SELECT p.relid FROM pg_partition_tree(r.rel) p WHERE p.isleaf) t
  LOOP
    EXECUTE format('ALTER TABLE %s SET (fillfactor = 50)', leaf);
  END LOOP;
END $$;
