-- The delivery log is bounded in bytes, every column counted: each row
-- keeps its counted size (column bytes plus 160 for SQLite's own cost,
-- state/limits.go storedSize), and log_meta keeps the running row count
-- and byte total, so the writer knows when to prune without scanning.
ALTER TABLE deliveries ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
UPDATE deliveries SET size = 160 + length(CAST(delivery_id AS BLOB)) + length(CAST(at AS BLOB))
  + length(CAST(trigger_ref AS BLOB)) + length(CAST(event_id AS BLOB)) + length(CAST(digest AS BLOB))
  + length(CAST(error_code AS BLOB)) + length(CAST(queue_id AS BLOB)) + length(CAST(remote_addr AS BLOB))
  + length(CAST(headers AS BLOB)) + coalesce(length(body), 0);
INSERT INTO log_meta (key, value) VALUES ('rows', (SELECT COUNT(*) FROM deliveries));
INSERT INTO log_meta (key, value) VALUES ('row_bytes', (SELECT coalesce(SUM(size), 0) FROM deliveries));
UPDATE log_meta SET value = (SELECT coalesce(SUM(length(body)), 0) FROM deliveries) WHERE key = 'body_bytes';
