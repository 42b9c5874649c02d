-- The operator's --reason of an action (SPEC §6), '' when none was given.
ALTER TABLE operator_events ADD COLUMN reason TEXT NOT NULL DEFAULT '';
