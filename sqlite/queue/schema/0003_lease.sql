-- The fencing token of an entry's lease (SPEC §8): each lease of the entry
-- takes the next value, and Finish, Retry, Postpone and Renew change the
-- entry only under the token they were given. One process owns the file
-- (the journal lock), so a stale token here is a bug, refused all the same.
ALTER TABLE entries ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0;
