-- Listings of one trigger's entries in queue order, paged by a keyset
-- (queue_id > cursor): the console's entries page stays as fast at the
-- millionth entry as at the first.
CREATE INDEX entries_trigger_list ON entries (trigger_ref, queue_id);
