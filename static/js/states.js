// Job states and public statuses for the browser: the same lists as
// jobfeed/worker/states.py (tests/test_rules.py keeps the two equal;
// JOBFEED_UPDATE_STATES=1 python -m pytest tests/test_rules.py rewrites the
// two literal lists below from the Python ones).

// True states, in the order the admin dashboard shows them.
export const STATES = ["waiting", "queued", "running", "completed", "failed", "canceled"];
// Final states; a final state's public status is the state itself.
export const TERMINAL = new Set(["completed", "failed", "canceled"]);
// What end users see.
export const STATUSES = ["queued", "processing", ...STATES.filter((s) => TERMINAL.has(s))];
export const UNFINISHED = STATES.filter((s) => !TERMINAL.has(s));
export const CANCELABLE = UNFINISHED;
export const RETRYABLE = STATES.filter((s) => TERMINAL.has(s) && s !== "completed");
