-- Lists of constants on entries' write path written as ORs (issue 42).
--
-- SQLite evaluates `status IN ('a','b','c')` (three or more constants) by
-- building a temporary b-tree of the list, and it builds it again each
-- time the expression runs. The status CHECK and the predicates of
-- entries_key and entries_finished run on every insert of an entry and on
-- every change of its status: three temporary b-trees made and freed per
-- write, about seven per delivery, some 8% of the daemon's CPU end to end
-- (docs/performance.md, "Round 13"). `status = 'a' OR status = 'b' OR ...`
-- admits the same rows and compares in place.
--
-- The CHECK: SQLite cannot alter one, and an equivalent CHECK does not
-- change what is stored, so its text is replaced in place, as SQLite's
-- documentation describes for changing a constraint without rebuilding
-- the table (lang_altertable.html, "Making Other Kinds Of Table Schema
-- Changes"). RESET reloads this connection's schema, so the rest of this
-- transaction runs under the new text; the DROP and CREATE INDEX below
-- change the schema cookie, which makes every other connection reload it.
-- A table whose text does not hold the old list (none is known) keeps its
-- CHECK: replace() changes nothing.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql,
     'CHECK (status IN (''pending'',''running'',''waiting'',''done'',''failed'',''parked'',''cancelled'',''merged''))',
     'CHECK (status = ''pending'' OR status = ''running'' OR status = ''waiting'' OR status = ''done'' OR status = ''failed'' OR status = ''parked'' OR status = ''cancelled'' OR status = ''merged'')')
 WHERE type = 'table' AND name = 'entries';
PRAGMA writable_schema = RESET;

-- The partial indexes: same rows, so rebuilt under the equivalent
-- predicate. The queries that use them repeat the predicate word for word
-- (SQLite uses a partial index only for a query whose WHERE holds its
-- predicate's terms): concurrency.go and history.go (finishedList). The
-- previous release's queries still say IN (...): on this file they no
-- longer match, and read entries without these two indexes, slower but
-- the same answers (docs/upgrades.md).
DROP INDEX entries_key;
CREATE INDEX entries_key ON entries (trigger_ref, conc_key, queue_id)
  WHERE conc_key IS NOT NULL AND (status = 'pending' OR status = 'running' OR status = 'parked' OR status = 'waiting');
DROP INDEX entries_finished;
CREATE INDEX entries_finished ON entries (received_at, queue_id)
  WHERE (status = 'done' OR status = 'cancelled' OR status = 'merged');
