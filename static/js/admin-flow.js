// Admin dashboard: flow control. The kinds with their limits and a pause /
// resume button, the periodic schedules with their last and next run, and
// bulk retry / cancel of the jobs the list's filters select, showing how many
// that is before asking to confirm.

import { clearMessage, h, showError, showNote, timeEl } from "./api.js";
import { $, adminApi, badge } from "./admin-shared.js";
import { loadJobs } from "./admin-list.js";

function flow(kind) {
  const parts = [`priority ${kind.priority}`];
  if (kind.max_running) parts.push(`max ${kind.max_running} running`);
  if (kind.max_running_per_key) parts.push(`max ${kind.max_running_per_key} per key`);
  if (kind.rate) parts.push(`${kind.rate.count} starts per ${kind.rate.period_seconds}s`);
  return parts.join(" · ");
}

export async function loadKinds() {
  // the rows are made anew: a keyboard user's focus stays on the same kind's button
  const focused = document.activeElement?.closest?.("#kinds tr")?.dataset.kind;
  try {
    const { data } = await adminApi("/api/kinds");
    $("kinds").tBodies[0].replaceChildren(...data.kinds.map((kind) => h("tr", { "data-kind": kind.kind },
      h("th", { scope: "row" }, kind.kind),
      h("td", {}, flow(kind)),
      h("td", {},
        kind.paused ? badge("paused") : h("span", {}, "claiming "),
        h("button", {
          type: "button", class: "secondary", "data-action": kind.paused ? "resume" : "pause",
          "aria-label": `${kind.paused ? "Resume" : "Pause"} ${kind.kind}`,
          onclick: () => setPaused(kind.kind, !kind.paused),
        }, kind.paused ? "Resume" : "Pause")))));
    if (focused !== undefined) {
      $("kinds").querySelector(`tr[data-kind="${CSS.escape(focused)}"] button`)?.focus();
    }
  } catch (err) {
    if (err.status !== 401) showError($("kinds-message"), err);
  }
}

async function setPaused(kind, paused) {
  try {
    await adminApi(`/api/admin/kinds/${encodeURIComponent(kind)}/${paused ? "pause" : "resume"}`,
      { method: "POST" });
    showNote($("kinds-message"), `${kind} ${paused ? "paused: nothing of it is claimed" : "resumed"}.`);
  } catch (err) {
    showError($("kinds-message"), err);
  }
  await loadKinds();
}

export async function loadSchedules() {
  try {
    const { data } = await adminApi("/api/admin/schedules");
    $("schedules-empty").hidden = data.schedules.length > 0;
    $("schedules").tBodies[0].replaceChildren(...data.schedules.map((s) => h("tr", {},
      h("th", { scope: "row" }, s.kind),
      h("td", {}, s.schedule ? `${s.schedule} (${s.timezone})` : `every ${s.every_seconds}s`),
      h("td", {}, s.last_slot ? [timeEl(s.last_slot), " ", badge(s.last_status || "—")] : "never"),
      h("td", {}, timeEl(s.next_slot)))));
  } catch {
    // the stats panel reports a lost session
  }
}

// What the list's filters select; bulk actions refuse an empty filter.
function filter() {
  const f = {};
  if ($("filter-state").value) f.state = $("filter-state").value;
  if ($("filter-kind").value) f.kind = $("filter-kind").value;
  return f;
}

const ACTS_ON = { retry: ["failed", "canceled"], cancel: ["queued", "running", "waiting"] };
// The counts include jobs a retry leaves alone (the SQL's rule, applied as it
// runs): the question says so, and the answer's "skipped" says how many.
const SKIPS = "Any whose target a newer unfinished job holds is skipped.";
const SKIPPED_WHY = "a newer unfinished job holds the target, or the job changed meanwhile";

const nJobs = (n) => `${n} job${n === 1 ? "" : "s"}`;
let asked = null; // the action and filter awaiting confirmation

async function ask(action) {
  clearMessage($("bulk-message"));
  const f = filter();
  if (!f.state && !f.kind) {
    showError($("bulk-message"), new Error("Choose a state or a kind first: bulk actions need a filter."));
    return;
  }
  // How many: the stats' counts by kind and state (a few seconds old at most).
  let n = 0;
  try {
    const { data } = await adminApi("/api/admin/stats");
    for (const [kind, states] of Object.entries(data.counts || {})) {
      if (f.kind && kind !== f.kind) continue;
      for (const [state, count] of Object.entries(states)) {
        if (ACTS_ON[action].includes(state) && (!f.state || state === f.state)) n += count;
      }
    }
  } catch (err) {
    showError($("bulk-message"), err);
    return;
  }
  asked = { action, f, opener: document.activeElement };
  const what = [f.kind, f.state].filter(Boolean).join(", ");
  $("bulk-question").textContent = `${action === "retry" ? "Retry" : "Cancel"} ${nJobs(n)} (${what})?`
    + (action === "retry" ? ` ${SKIPS}` : "");
  $("bulk-confirm").hidden = false;
  $("bulk-yes").focus();
}

// The question closes (answered, kept, Escape) with focus back where it was asked.
function closeQuestion() {
  const opener = asked && asked.opener;
  asked = null;
  $("bulk-confirm").hidden = true;
  if (opener && opener.isConnected) opener.focus();
}

async function confirm() {
  const { action, f } = asked;
  closeQuestion();
  try {
    const { data } = await adminApi(`/api/admin/jobs/${action}`, { method: "POST", body: f });
    const skipped = data.skipped ? `; skipped ${data.skipped} (${SKIPPED_WHY})` : "";
    showNote($("bulk-message"), `${action === "retry" ? "Retried" : "Canceled"} ${nJobs(data.count)}${skipped}.`);
  } catch (err) {
    showError($("bulk-message"), err);
  }
  loadJobs();
}

// Kinds (paused or not) and schedules (their next run) change outside this
// page too (the CLI, another admin, time passing), and the admin event stream
// carries jobs only: read again every few seconds while the page is seen.
const FLOW_EVERY_MS = 5000;
let flowTimer = null;

export function startFlow() {
  const load = () => { loadKinds(); loadSchedules(); };
  load();
  clearInterval(flowTimer);
  flowTimer = setInterval(() => { if (!document.hidden) load(); }, FLOW_EVERY_MS);
}

export function listenToFlow() {
  $("bulk-retry").addEventListener("click", () => ask("retry"));
  $("bulk-cancel").addEventListener("click", () => ask("cancel"));
  $("bulk-yes").addEventListener("click", confirm);
  $("bulk-no").addEventListener("click", closeQuestion);
  $("bulk-confirm").addEventListener("keydown", (e) => {
    if (e.key === "Escape") closeQuestion();
  });
}
