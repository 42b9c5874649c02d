-- Binding circuits (SPEC §2.2 circuit, issue 43): the state of each
-- binding whose circuit ever left closed, so that a restart keeps an open
-- circuit open (PostgreSQL's binding_circuits has done so since 0003).
-- Without it a daemon restarted on a failing remote sent it min_calls
-- more tries before the circuit opened again. state is closed, open
-- (until: when a probe may go) or probing (since: when the probe was
-- claimed; a probe whose process died is claimed again once stale).
--
-- A new table: the previous release never reads or writes it.
CREATE TABLE binding_circuits (
  tool_ref TEXT PRIMARY KEY,
  state    TEXT NOT NULL CHECK (state IN ('closed', 'open', 'probing')),
  until    TEXT NOT NULL DEFAULT '',
  since    TEXT NOT NULL,
  calls    INTEGER NOT NULL DEFAULT 0,
  failures INTEGER NOT NULL DEFAULT 0
) STRICT;
