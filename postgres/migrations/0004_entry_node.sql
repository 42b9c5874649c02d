-- The node that last leased each entry (SPEC §8: `queue ls`, `queue show`
-- and the console show the node that holds or last ran an entry);
-- lease_owner is cleared when the run ends, last_node is kept.
ALTER TABLE entries ADD COLUMN last_node TEXT;
