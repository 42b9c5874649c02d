-- The W3C traceparent of the delivery's touba.intake span, so every run
-- attempt, however much later and in whichever process, joins its trace
-- (SPEC §7). '' when tracing was off at intake.
ALTER TABLE entries ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
