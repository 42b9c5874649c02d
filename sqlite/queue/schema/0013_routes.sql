-- Routes (SPEC §2.4): what an entry records of routes, as JSON
-- (touba.Routing): for an entry of an accepting trigger, each route of its
-- trigger and whether it fed it (the route's entry) or why not; for a
-- route's entry, the accepting entry it came from. NULL for every other
-- entry. Written in intake's transaction with the entry, read by queue
-- show only.
--
-- A new nullable column: the previous release never reads or writes it.
ALTER TABLE entries ADD COLUMN routing TEXT;
