-- Delivery log listings of one trigger, newest first, paged by a keyset
-- (seq < the cursor's seq): the console's deliveries filter by trigger.
CREATE INDEX deliveries_trigger ON deliveries (trigger_ref, seq);
