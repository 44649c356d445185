"""Job states and public statuses: the one Python source of both (the browser's
copy is static/js/states.js; tests/test_rules.py checks both against the
database's enum and its public_status function).

A new true state is one line in STATES (plus the enum value and public_status
in SQL; JOBFEED_UPDATE_STATES=1 on tests/test_rules.py then rewrites the
browser's copy); everything else here is derived."""

from __future__ import annotations

# The true states, in the order the admin UI lists them (enum jobfeed.job_state).
STATES: tuple[str, ...] = ("waiting", "queued", "running", "completed", "failed", "canceled")

# Final states: nothing more happens to the job until an admin retries it.
# Their public status is the state itself.
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "canceled"})

# What end users see: never-started jobs are `queued`, every other unfinished
# job `processing` (retries are invisible), final ones as they are.
STATUSES: tuple[str, ...] = ("queued", "processing", *(s for s in STATES if s in TERMINAL))

UNFINISHED: tuple[str, ...] = tuple(s for s in STATES if s not in TERMINAL)
# What the admin actions accept: cancel an unfinished job, retry a final one
# that did not complete.
CANCELABLE: tuple[str, ...] = UNFINISHED
RETRYABLE: tuple[str, ...] = tuple(s for s in STATES if s in TERMINAL and s != "completed")
