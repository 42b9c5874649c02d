-- The effects' state CHECK written as ORs (issue 42): SQLite evaluates
-- `state IN (...)` of five constants by building a temporary b-tree of
-- the list each time, and the CHECK runs on every insert of an effect and
-- every change of its state (twice an effect). The queue's 0014 says why
-- and how: the CHECK's text is replaced in place, as SQLite's
-- documentation describes for a constraint that changes nothing stored.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql,
     'CHECK (state IN (''prepared'',''dispatched'',''applied'',''not_applied'',''unknown''))',
     'CHECK (state = ''prepared'' OR state = ''dispatched'' OR state = ''applied'' OR state = ''not_applied'' OR state = ''unknown'')')
 WHERE type = 'table' AND name = 'effects';
PRAGMA writable_schema = RESET;
-- The same trigger made again: a schema change, so that every other
-- connection to this file reloads the schema (the cookie it checks).
DROP TRIGGER effects_applied_final;
CREATE TRIGGER effects_applied_final BEFORE UPDATE ON effects WHEN OLD.state = 'applied'
BEGIN SELECT RAISE(ABORT, 'an applied effect is never rewritten'); END;
