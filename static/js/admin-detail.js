// Admin dashboard: one job's detail (every fact and attempt), with retry and
// cancel. The selected job is in the address (#job=ID), so a link opens it.

import { renderTimeline } from "./admin-timeline.js";
import { clearMessage, h, prettyJson, showError, showNote, shown, timeEl, url } from "./api.js";
import { $, adminApi, badge, errorText, soon } from "./admin-shared.js";
import { remember, renderJobs } from "./admin-list.js";
import { loadStats } from "./admin-stats.js";
import { CANCELABLE, RETRYABLE } from "./states.js";

let selectedId = null;
let selected = null; // the detail view of selectedId

export function selectedJobId() {
  return selectedId;
}

// The detail's message region carries an action's note or a read's error; a
// read that works again clears only a read's error.
function clearActionMessage() {
  const region = $("action-message");
  clearMessage(region);
  delete region.dataset.readError;
}

export async function openJob(id, { focus = true } = {}) {
  selectedId = id;
  history.replaceState(null, "", `#job=${encodeURIComponent(id)}`);
  clearActionMessage();
  await loadDetail();
  renderJobs();
  if (focus && !$("detail").hidden) {
    $("detail").focus();
    $("detail").scrollIntoView({ block: "start" });
  }
}

export async function loadDetail() {
  if (!selectedId) return;
  const id = selectedId;
  try {
    const { data } = await adminApi(`/api/admin/jobs/${encodeURIComponent(id)}`);
    if (id !== selectedId) return;
    selected = data;
    remember(stripLog(data));
    if ($("action-message").dataset.readError) clearActionMessage();
    renderDetail();
  } catch (err) {
    if (err.status === 401 || id !== selectedId) return;
    $("detail").hidden = false;
    showError($("action-message"), err);
    $("action-message").dataset.readError = "1";
  }
}

function stripLog(job) {
  const { attempts_log: _log, children: _children, children_count: _count, ...view } = job;
  return view;
}

function jobLink(id, text) {
  return h("a", {
    href: `#job=${encodeURIComponent(id)}`,
    onclick: (e) => { e.preventDefault(); openJob(id); },
  }, text);
}

// the jobs this one's handler submitted (ctx.submit), each a link to its detail
function childrenList(job) {
  const children = job.children || [];
  if (!children.length) return "—";
  const more = (job.children_count || 0) - children.length;
  return h("ul", { class: "children" },
    ...children.map((c) => h("li", {}, jobLink(c.id, `${c.kind}: ${shown(c.target)}`), " ", badge(c.state))),
    ...(more > 0 ? [h("li", { class: "muted" }, `and ${more} more`)] : []));
}

let announced = null; // the job and state last said in #detail-live

function renderDetail() {
  const job = selected;
  $("detail").hidden = false;
  // a screen reader hears the open job's state change (not the first render:
  // the heading says which job opened, nor progress, which would never stop)
  if (announced && announced.id === job.id && announced.state !== job.state) {
    $("detail-live").textContent = `${job.kind}: ${shown(job.target)} is now ${job.state}.`;
  }
  announced = { id: job.id, state: job.state };
  $("detail-heading").textContent = `${job.kind}: ${shown(job.target)}`;
  const p = job.progress;
  const facts = [
    ["Id", job.id],
    ["State", badge(job.state)],
    ["Public status", job.status],
    ["Attempts", `${job.attempts} of ${job.max_attempts} (generation ${job.generation})`],
    ["Progress", p ? `${p.done} of ${p.total}${p.message ? ` · ${shown(p.message)}` : ""}` : "—"],
    ["Last error", job.last_error ? h("span", { class: "error-text long-text" }, errorText(job.last_error)) : "—"],
    ["Run after", timeEl(job.run_after)],
    ["Lease until", timeEl(job.lease_until)],
    ["Worker", job.worker_id || "—"],
    // a child (ctx.submit) links to the job whose handler submitted it
    ["Parent", job.parent_id ? jobLink(job.parent_id, job.parent_id) : "—"],
    ["Children", childrenList(job)],
    ["Created", timeEl(job.created_at)],
    ["Started", timeEl(job.started_at)],
    ["Updated", timeEl(job.updated_at)],
    ["Finished", timeEl(job.finished_at)],
  ];
  $("detail-facts").replaceChildren(...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));

  const log = job.attempts_log || [];
  renderTimeline($("timeline"), job);
  $("attempts").tBodies[0].replaceChildren(...(log.length ? log.map((a) => h("tr", {},
    h("td", { class: "num", "data-label": "Attempt" }, String(a.attempt)),
    h("td", { class: "num", "data-label": "Generation" }, String(a.generation)),
    h("td", { "data-label": "Worker", class: "small" }, a.worker_id || "—"),
    h("td", { "data-label": "Started", class: "small" }, timeEl(a.started_at)),
    h("td", { "data-label": "Finished", class: "small" }, timeEl(a.finished_at)),
    h("td", { "data-label": "Outcome" }, a.outcome || "running"),
    h("td", { "data-label": "Error", class: a.error ? "error-text small" : "muted" },
      a.error ? h("span", { class: "long-text" }, errorText(a.error)) : "—")))
    : [h("tr", {}, h("td", { colspan: 7, class: "muted" }, "Not started yet."))]));

  $("detail-payload").textContent = prettyJson(job.payload ?? {});
  $("detail-result-wrap").hidden = job.result == null;
  $("detail-result").textContent = job.result == null ? "" : prettyJson(job.result);
  $("public-link").href = url(`jobs/${encodeURIComponent(job.id)}`);
  // Offer what the server allows now; it still decides (409 when the state moved on).
  $("retry").disabled = !RETRYABLE.includes(job.state);
  $("cancel").disabled = !CANCELABLE.includes(job.state);
}

function closeDetail() {
  const id = selectedId;
  selectedId = null;
  selected = null;
  $("detail").hidden = true;
  history.replaceState(null, "", location.pathname);
  renderJobs();
  const button = document.querySelector(`tr[data-job-id="${CSS.escape(id)}"] button`);
  if (button) button.focus();
}

async function act(action) {
  const id = selectedId;
  const region = $("action-message");
  clearActionMessage();
  const button = $(action);
  button.disabled = true;
  try {
    const { data } = await adminApi(`/api/admin/jobs/${encodeURIComponent(id)}/${action}`, { method: "POST" });
    const state = data && (data.state || (data.job && data.job.state));
    showNote(region, action === "retry"
      ? `Retry accepted: the job went back to ${state || "queued"} and runs when a worker is free.`
      : `Cancel accepted: the job is now ${state || "canceled"}.`);
  } catch (err) {
    if (err.status !== 401) showError(region, err);
  }
  await loadDetail();
  // the button is disabled now (a canceled job cannot be canceled): focus what
  // says what happened, not the page's body
  if (button.disabled) region.focus();
  soon("stats", loadStats);
}

export function listenToDetail() {
  $("retry").addEventListener("click", () => act("retry"));
  $("cancel").addEventListener("click", () => act("cancel"));
  $("close-detail").addEventListener("click", closeDetail);
}

// Open the job the address names (#job=ID), if any.
export function openFromAddress() {
  const match = location.hash.match(/^#job=(.+)$/);
  if (match) openJob(decodeURIComponent(match[1]), { focus: false });
}
