// Admin dashboard: the jobs table, newest first, with its state and kind
// filters and paging; rows stay current from the live stream's events.

import { api, clearMessage, h, showError, shown, timeEl } from "./api.js";
import { $, adminApi, badge, errorText } from "./admin-shared.js";
import { openJob, selectedJobId } from "./admin-detail.js";
import { STATES } from "./states.js";

// A row shows this much of its job's last error (its detail, all of it).
const LIST_ERROR_CHARS = 300;

export const jobs = new Map(); // id -> admin view, the rows of the table
let nextCursor = null;

function filters() {
  return { state: $("filter-state").value, kind: $("filter-kind").value };
}

export function matchesFilters(job) {
  const f = filters();
  return (!f.state || job.state === f.state) && (!f.kind || job.kind === f.kind);
}

// Keep the newer of two views of a job (an event may overtake a list read).
export function remember(job) {
  const known = jobs.get(job.id);
  if (!known || job.version >= known.version) jobs.set(job.id, job);
}

let reads = 0; // the latest list read: only its answer is drawn (filters may change meanwhile)

export async function loadJobs({ more = false } = {}) {
  const read = ++reads;
  const params = new URLSearchParams({ limit: "50" });
  const f = filters();
  if (f.state) params.set("state", f.state);
  if (f.kind) params.set("kind", f.kind);
  if (more && nextCursor) params.set("cursor", nextCursor);
  try {
    const { data } = await adminApi(`/api/admin/jobs?${params}`);
    if (read !== reads) return;
    if (!more) {
      const fresh = new Map(data.jobs.map((j) => [j.id, j]));
      for (const [id, known] of jobs) {
        if (fresh.has(id) && known.version > fresh.get(id).version) fresh.set(id, known);
      }
      jobs.clear();
      for (const [id, job] of fresh) jobs.set(id, job);
    } else {
      data.jobs.forEach(remember);
    }
    nextCursor = data.next_cursor || null;
    clearMessage($("jobs-error"));
    renderJobs();
  } catch (err) {
    if (err.status !== 401 && read === reads) showError($("jobs-error"), err);
  }
}

function newestFirst(a, b) {
  return a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : a.id < b.id ? 1 : -1;
}

export function renderJobs() {
  const rows = [...jobs.values()].sort(newestFirst).map((job) => h("tr", {
    "data-job-id": job.id,
    "aria-current": job.id === selectedJobId() ? "true" : null,
  },
  h("td", { "data-label": "Job" },
    h("div", {},
      h("button", {
        type: "button",
        class: "link",
        "aria-label": `Open ${job.kind} job ${shown(job.target)}`,
        onclick: () => openJob(job.id),
      }, shown(job.target)),
      h("div", { class: "small muted" }, job.kind))),
  h("td", { "data-label": "State" }, badge(job.state)),
  h("td", { class: "num", "data-label": "Attempts" }, `${job.attempts} / ${job.max_attempts}`),
  h("td", { "data-label": "Last error", class: "error-text small" }, errorText(job.last_error, LIST_ERROR_CHARS) || h("span", { class: "muted" }, "—")),
  h("td", { "data-label": "Updated", class: "small" }, timeEl(job.updated_at))));
  $("jobs").tBodies[0].replaceChildren(...rows);
  $("jobs-empty").hidden = rows.length > 0;
  $("more").hidden = !nextCursor;
}

export async function loadKindFilter() {
  try {
    const { data } = await api("/api/kinds");
    const kinds = Array.isArray(data) ? data : (data && data.kinds) || [];
    $("filter-kind").replaceChildren(h("option", { value: "" }, "all"),
      ...kinds.map((k) => h("option", { value: k.kind }, k.kind)));
  } catch {
    // The filter stays at "all"; the table still works.
  }
}

export function listenToFilters() {
  $("filter-state").append(...STATES.map((s) => h("option", { value: s }, s)));
  $("filter-state").addEventListener("change", () => loadJobs());
  $("filter-kind").addEventListener("change", () => loadJobs());
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  $("more").addEventListener("click", () => loadJobs({ more: true }));
}
