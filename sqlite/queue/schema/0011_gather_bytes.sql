-- The bytes of the bodies an open gathering holds (max_bytes, issue 43),
-- beside its size and moved in the same statement (gather.go): summing
-- the merged bodies at each merge would read every merged entry per
-- delivery. NULL: not counted yet, for a gathering opened by a release
-- that kept no count; its bodies are summed once, at its next merge.
--
-- A new nullable column: the previous release never reads or writes it,
-- and keeps started_at as it did (NULL until the gathering starts).
ALTER TABLE gatherings ADD COLUMN bytes INTEGER;
