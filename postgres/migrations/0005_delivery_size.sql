-- The delivery log's byte bounds (--delivery-log-max-bytes, every column
-- counted, and --delivery-log-max-body-bytes, stored bodies), as the
-- SQLite file has them: each row's counted size, written with it
-- (postgres/logbytes.go storedSize; the rows before, computed here alike).
ALTER TABLE deliveries ADD COLUMN size BIGINT NOT NULL DEFAULT 0;
UPDATE deliveries SET size = octet_length(delivery_id) + octet_length(at) + octet_length(trigger_ref)
  + octet_length(event_id) + octet_length(digest) + octet_length(error_code) + octet_length(queue_id)
  + octet_length(remote_addr) + octet_length(headers) + COALESCE(octet_length(body), 0) + 160;
