// Admin dashboard /admin: sign in with the token (an HttpOnly cookie), then
// live counts, a throughput chart, recent jobs with their true state, and one
// job's detail with retry / cancel. /api/admin/events keeps it all current.

import {
  api, clearMessage, formatSeconds, h, prettyJson, showError, showNote, timeEl, url,
} from "./api.js";

const STATES = ["queued", "running", "completed", "failed", "canceled"];
const STATS_EVERY_MS = 5000;
const CHART_MINUTES = 15;
const RETRY_MS = 3000;

const $ = (id) => document.getElementById(id);

const jobs = new Map(); // id -> admin view, the rows of the table
let nextCursor = null;
let selectedId = null;
let selected = null; // the detail view of selectedId
let source = null;
let statsTimer = null;
let lastStats = null;
const pending = {}; // throttled refreshes by name

// At most one run of fn per `ms` for a name, however many events ask for it.
function soon(name, fn, ms = 400) {
  if (pending[name]) return;
  pending[name] = setTimeout(() => {
    delete pending[name];
    fn();
  }, ms);
}

// An admin request; a 401 (no or expired session) shows the sign-in form.
async function adminApi(path, options) {
  try {
    return await api(path, options);
  } catch (err) {
    if (err.status === 401) showSignIn();
    throw err;
  }
}

function badge(state) {
  return h("span", { class: "badge", "data-status": state }, state);
}

function errorText(error) {
  return error ? `${error.code}: ${error.message}` : "";
}

/* Sign-in */

function showSignIn() {
  if (source) source.close();
  source = null;
  clearInterval(statsTimer);
  $("dashboard").hidden = true;
  $("signin").hidden = false;
  $("token").focus();
}

async function signIn(event) {
  event.preventDefault();
  const region = $("signin-error");
  clearMessage(region);
  const token = $("token").value;
  if (!token) {
    showError(region, new Error("Enter the admin token."));
    $("token").focus();
    return;
  }
  try {
    await api("/api/admin/session", { method: "POST", body: { token } });
  } catch (err) {
    showError(region, err);
    $("token").select();
    return;
  }
  $("token").value = "";
  $("signin").hidden = true;
  startDashboard();
}

/* Stats: counts and the chart */

async function loadStats() {
  try {
    const { data } = await adminApi("/api/admin/stats");
    clearMessage($("stats-error"));
    lastStats = data;
    renderCounts(data);
    renderChart(data);
  } catch (err) {
    if (err.status !== 401) showError($("stats-error"), err);
  }
}

function renderCounts(stats) {
  const kinds = Object.keys(stats.counts || {}).sort();
  const headRow = $("counts").tHead.rows[0];
  headRow.replaceChildren(
    h("th", { scope: "col" }, "Kind"),
    ...STATES.map((s) => h("th", { scope: "col", class: "num" }, s)),
    h("th", { scope: "col", class: "num" }, "total"));
  const row = (label, counts, isTotal = false) => {
    const total = STATES.reduce((sum, s) => sum + (counts[s] || 0), 0);
    return h("tr", { class: total ? null : "zero" },
      h("th", { scope: "row" }, isTotal ? h("strong", {}, label) : label),
      ...STATES.map((s) => h("td", { class: "num", "data-label": s, "data-state": s }, String(counts[s] || 0))),
      h("td", { class: "num", "data-label": "total" }, String(total)));
  };
  const rows = kinds.map((k) => row(k, stats.counts[k]));
  if (kinds.length > 1) {
    const sums = {};
    for (const k of kinds) for (const s of STATES) sums[s] = (sums[s] || 0) + (stats.counts[k][s] || 0);
    rows.push(row("all kinds", sums, true));
  }
  if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: STATES.length + 2, class: "muted" }, "No jobs yet.")));
  $("counts").tBodies[0].replaceChildren(...rows);
  $("oldest-due").textContent = stats.oldest_due_seconds == null ? "none" : formatSeconds(stats.oldest_due_seconds);
  $("stats-time").replaceChildren(timeEl(stats.now));
}

// Bars per minute for the last CHART_MINUTES minutes, drawn to the box's width.
function renderChart(stats) {
  const box = $("chart");
  const MINUTE = 60000;
  const end = Math.floor(Date.parse(stats.now) / MINUTE) * MINUTE;
  const byMinute = new Map();
  for (const point of stats.throughput || []) {
    byMinute.set(Math.floor(Date.parse(point.minute) / MINUTE) * MINUTE, point);
  }
  const minutes = [];
  for (let i = CHART_MINUTES - 1; i >= 0; i--) {
    const t = end - i * MINUTE;
    const point = byMinute.get(t) || {};
    minutes.push({ t, completed: point.completed || 0, failed: point.failed || 0 });
  }
  const totalCompleted = minutes.reduce((n, m) => n + m.completed, 0);
  const totalFailed = minutes.reduce((n, m) => n + m.failed, 0);
  const busiest = Math.max(...minutes.map((m) => m.completed + m.failed));
  const peak = Math.max(1, busiest);

  const width = Math.max(240, box.clientWidth);
  const height = 160;
  const pad = { left: 36, right: 6, top: 8, bottom: 22 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const slot = plotW / minutes.length;
  const barW = Math.max(2, slot * 0.7);
  const y = (n) => pad.top + plotH - (n / peak) * plotH;
  const clock = (t) => new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

  const NS = "http://www.w3.org/2000/svg";
  const svg = (tag, attrs = {}, text) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = text;
    return el;
  };
  const summary = `Last ${CHART_MINUTES} minutes: ${totalCompleted} completed, ${totalFailed} failed; `
    + `busiest minute ${busiest} jobs.`;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": summary });
  root.append(svg("title", {}, summary));
  root.append(svg("line", { class: "axis", x1: pad.left, x2: width - pad.right, y1: y(0), y2: y(0) }));
  root.append(svg("line", { class: "axis", x1: pad.left, x2: width - pad.right, y1: y(peak), y2: y(peak), "stroke-dasharray": "3 3" }));
  root.append(svg("text", { x: pad.left - 6, y: y(peak) + 4, "text-anchor": "end" }, String(peak)));
  root.append(svg("text", { x: pad.left - 6, y: y(0) + 4, "text-anchor": "end" }, "0"));
  minutes.forEach((m, i) => {
    const x = pad.left + i * slot + (slot - barW) / 2;
    const tip = `${clock(m.t)}: ${m.completed} completed, ${m.failed} failed`;
    if (m.completed) {
      const bar = svg("rect", { class: "bar-completed", x, width: barW, y: y(m.completed), height: y(0) - y(m.completed) });
      bar.append(svg("title", {}, tip));
      root.append(bar);
    }
    if (m.failed) {
      const top = y(m.completed + m.failed);
      const bar = svg("rect", { class: "bar-failed", x, width: barW, y: top, height: y(m.completed) - top });
      bar.append(svg("title", {}, tip));
      root.append(bar);
    }
  });
  for (const i of [0, Math.floor(minutes.length / 2), minutes.length - 1]) {
    const anchor = i === 0 ? "start" : i === minutes.length - 1 ? "end" : "middle";
    const x = i === 0 ? pad.left : i === minutes.length - 1 ? width - pad.right : pad.left + (i + 0.5) * slot;
    root.append(svg("text", { x, y: height - 6, "text-anchor": anchor }, clock(minutes[i].t)));
  }
  box.replaceChildren(root);
}

/* The jobs table */

function filters() {
  return { state: $("filter-state").value, kind: $("filter-kind").value };
}

function matchesFilters(job) {
  const f = filters();
  return (!f.state || job.state === f.state) && (!f.kind || job.kind === f.kind);
}

// Keep the newer of two views of a job (an event may overtake a list read).
function remember(job) {
  const known = jobs.get(job.id);
  if (!known || job.version >= known.version) jobs.set(job.id, job);
}

async function loadJobs({ more = false } = {}) {
  const params = new URLSearchParams({ limit: "50" });
  const f = filters();
  if (f.state) params.set("state", f.state);
  if (f.kind) params.set("kind", f.kind);
  if (more && nextCursor) params.set("cursor", nextCursor);
  try {
    const { data } = await adminApi(`/api/admin/jobs?${params}`);
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
    if (err.status !== 401) showError($("jobs-error"), err);
  }
}

function newestFirst(a, b) {
  return a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : a.id < b.id ? 1 : -1;
}

function renderJobs() {
  const rows = [...jobs.values()].sort(newestFirst).map((job) => h("tr", {
    "data-job-id": job.id,
    "aria-current": job.id === selectedId ? "true" : null,
  },
  h("td", { "data-label": "Job" },
    h("div", {},
      h("button", {
        type: "button",
        class: "link",
        "aria-label": `Open ${job.kind} job ${job.target}`,
        onclick: () => openJob(job.id),
      }, job.target),
      h("div", { class: "small muted" }, job.kind))),
  h("td", { "data-label": "State" }, badge(job.state)),
  h("td", { class: "num", "data-label": "Attempts" }, `${job.attempts} / ${job.max_attempts}`),
  h("td", { "data-label": "Last error", class: "error-text small" }, errorText(job.last_error) || h("span", { class: "muted" }, "—")),
  h("td", { "data-label": "Updated", class: "small" }, timeEl(job.updated_at))));
  $("jobs").tBodies[0].replaceChildren(...rows);
  $("jobs-empty").hidden = rows.length > 0;
  $("more").hidden = !nextCursor;
}

/* One job's detail, retry and cancel */

async function openJob(id, { focus = true } = {}) {
  selectedId = id;
  history.replaceState(null, "", `#job=${encodeURIComponent(id)}`);
  clearMessage($("action-message"));
  await loadDetail();
  renderJobs();
  if (focus && !$("detail").hidden) {
    $("detail").focus();
    $("detail").scrollIntoView({ block: "start" });
  }
}

async function loadDetail() {
  if (!selectedId) return;
  const id = selectedId;
  try {
    const { data } = await adminApi(`/api/admin/jobs/${encodeURIComponent(id)}`);
    if (id !== selectedId) return;
    selected = data;
    remember(stripLog(data));
    renderDetail();
  } catch (err) {
    if (err.status === 401) return;
    $("detail").hidden = false;
    showError($("action-message"), err);
  }
}

function stripLog(job) {
  const { attempts_log: _log, ...view } = job;
  return view;
}

function renderDetail() {
  const job = selected;
  $("detail").hidden = false;
  $("detail-heading").textContent = `${job.kind}: ${job.target}`;
  const p = job.progress;
  const facts = [
    ["Id", job.id],
    ["State", badge(job.state)],
    ["Public status", job.status],
    ["Attempts", `${job.attempts} of ${job.max_attempts} (generation ${job.generation})`],
    ["Progress", p ? `${p.done} of ${p.total}${p.message ? ` · ${p.message}` : ""}` : "—"],
    ["Last error", job.last_error ? h("span", { class: "error-text" }, errorText(job.last_error)) : "—"],
    ["Run after", timeEl(job.run_after)],
    ["Lease until", timeEl(job.lease_until)],
    ["Worker", job.worker_id || "—"],
    ["Created", timeEl(job.created_at)],
    ["Started", timeEl(job.started_at)],
    ["Updated", timeEl(job.updated_at)],
    ["Finished", timeEl(job.finished_at)],
  ];
  $("detail-facts").replaceChildren(...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));

  const log = job.attempts_log || [];
  $("attempts").tBodies[0].replaceChildren(...(log.length ? log.map((a) => h("tr", {},
    h("td", { class: "num", "data-label": "Attempt" }, String(a.attempt)),
    h("td", { class: "num", "data-label": "Generation" }, String(a.generation)),
    h("td", { "data-label": "Worker", class: "small" }, a.worker_id || "—"),
    h("td", { "data-label": "Started", class: "small" }, timeEl(a.started_at)),
    h("td", { "data-label": "Finished", class: "small" }, timeEl(a.finished_at)),
    h("td", { "data-label": "Outcome" }, a.outcome || "running"),
    h("td", { "data-label": "Error", class: a.error ? "error-text small" : "muted" }, errorText(a.error) || "—")))
    : [h("tr", {}, h("td", { colspan: 7, class: "muted" }, "Not started yet."))]));

  $("detail-payload").textContent = prettyJson(job.payload ?? {});
  $("detail-result-wrap").hidden = job.result == null;
  $("detail-result").textContent = job.result == null ? "" : prettyJson(job.result);
  $("public-link").href = url(`jobs/${encodeURIComponent(job.id)}`);
  // Offer what the server allows now; it still decides (409 when the state moved on).
  $("retry").disabled = !["failed", "canceled"].includes(job.state);
  $("cancel").disabled = !["queued", "running"].includes(job.state);
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
  clearMessage(region);
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
  soon("stats", loadStats);
}

/* Live updates */

function setConnection(state, text) {
  const el = $("connection");
  el.dataset.state = state;
  el.textContent = text;
}

function connectEvents() {
  if (source) source.close();
  source = new EventSource(url("api/admin/events"));
  source.addEventListener("open", () => setConnection("live", "Live: changes appear as they happen."));
  // 'ready' (the subscription is live) and 'resync' (changes may have been
  // missed): re-read everything; the 'job' events that follow keep it current.
  const reread = () => {
    loadJobs();
    loadStats();
    loadDetail();
  };
  source.addEventListener("ready", reread);
  source.addEventListener("resync", reread);
  source.addEventListener("job", (event) => {
    const job = JSON.parse(event.data);
    if (jobs.has(job.id) || matchesFilters(job)) {
      if (matchesFilters(job)) remember(job);
      else jobs.delete(job.id);
      soon("jobs", renderJobs, 100);
    }
    if (job.id === selectedId) soon("detail", loadDetail, 200);
    soon("stats", loadStats, 1000);
  });
  source.addEventListener("error", async () => {
    if (source.readyState === EventSource.CONNECTING) {
      setConnection("reconnecting", "Connection lost: reconnecting…");
      return;
    }
    // Refused (e.g. the session expired): adminApi shows the sign-in on a 401.
    source.close();
    setConnection("reconnecting", "Connection lost: reconnecting…");
    try {
      await adminApi("/api/admin/stats");
    } catch (err) {
      if (err.status === 401) return;
    }
    setTimeout(() => { if (!$("dashboard").hidden) connectEvents(); }, RETRY_MS);
  });
}

async function loadKindFilter() {
  try {
    const { data } = await api("/api/kinds");
    const kinds = Array.isArray(data) ? data : (data && data.kinds) || [];
    $("filter-kind").replaceChildren(h("option", { value: "" }, "all"),
      ...kinds.map((k) => h("option", { value: k.kind }, k.kind)));
  } catch {
    // The filter stays at "all"; the table still works.
  }
}

function startDashboard() {
  $("signin").hidden = true;
  $("dashboard").hidden = false;
  loadKindFilter();
  connectEvents(); // its "ready" event loads jobs, stats and the selected job
  clearInterval(statsTimer);
  statsTimer = setInterval(() => { if (!document.hidden) loadStats(); }, STATS_EVERY_MS);
  const match = location.hash.match(/^#job=(.+)$/);
  if (match) openJob(decodeURIComponent(match[1]), { focus: false });
}

async function start() {
  // A session cookie from before makes the stats readable: no sign-in needed.
  try {
    await api("/api/admin/stats");
  } catch (err) {
    if (err.status === 401) {
      showSignIn();
      return;
    }
  }
  startDashboard();
}

async function signOut() {
  try {
    await api("/api/admin/session", { method: "DELETE" });
  } catch {
    // Signed out or not, show the form.
  }
  showSignIn();
}

$("signin").addEventListener("submit", signIn);
$("signout").addEventListener("click", signOut);
$("filter-state").addEventListener("change", () => loadJobs());
$("filter-kind").addEventListener("change", () => loadJobs());
$("filters").addEventListener("submit", (event) => event.preventDefault());
$("more").addEventListener("click", () => loadJobs({ more: true }));
$("retry").addEventListener("click", () => act("retry"));
$("cancel").addEventListener("click", () => act("cancel"));
$("close-detail").addEventListener("click", closeDetail);
new ResizeObserver(() => { if (lastStats) renderChart(lastStats); }).observe($("chart"));
start();
