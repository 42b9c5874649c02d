-- issue 28 (pgspeed): the lease fence of every journal write
-- (`UPDATE entries SET lease_expires_at = ...`, two per effect) changed an
-- indexed column, so each was a full new row version with an entry in
-- every index of entries, never a HOT update. Take-over finds expired
-- leases among the running entries through entries_ready (status, held,
-- queue_id) instead: they are at most the nodes' workers, and the pick
-- sorts them itself. With lease_expires_at in no index, and room left on
-- each page (fillfactor, for pages written from now on), the fence and
-- the dispatcher's renewals are HOT updates.
DROP INDEX IF EXISTS touba.entries_leases;
ALTER TABLE touba.entries SET (fillfactor = 80);
