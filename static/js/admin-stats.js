// Admin dashboard: counts by kind and state, the age of the oldest due job,
// and a chart of completions and failures per minute.

import { clearMessage, formatSeconds, h, showError, timeEl } from "./api.js";
import { $, adminApi } from "./admin-shared.js";
import { STATES } from "./states.js";
import { loadWorkers } from "./admin-workers.js";
import { loadCharts } from "./admin-charts.js";

const STATS_EVERY_MS = 5000;
const CHART_MINUTES = 15;

let statsTimer = null;
let lastStats = null;

// Re-read the stats every few seconds while the page is visible (the live
// stream asks for more reads as jobs change).
export function startStats() {
  clearInterval(statsTimer);
  statsTimer = setInterval(() => { if (!document.hidden) loadStats(); }, STATS_EVERY_MS);
}

export function stopStats() {
  clearInterval(statsTimer);
}

// The chart is drawn to its box's width: redraw when the box changes size.
export function fitChart() {
  new ResizeObserver(() => { if (lastStats) renderChart(lastStats); }).observe($("chart"));
}

export async function loadStats() {
  loadWorkers();  // read as often as the counts: every few seconds, and as jobs change
  loadCharts();
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
  // the counts' time: as_of, when they were counted (now is when they were answered)
  const counted = stats.as_of || stats.now;
  $("stats-time").replaceChildren(timeEl(counted));
  // Over a long history the finished jobs are counted less often than the rest.
  const kept = Boolean(stats.finished_as_of) && Date.parse(stats.finished_as_of) !== Date.parse(counted);
  $("finished-note").hidden = !kept;
  $("finished-time").replaceChildren(kept ? timeEl(stats.finished_as_of) : "—");
}

// Bars per minute for the last CHART_MINUTES minutes, drawn to the box's width.
function renderChart(stats) {
  const box = $("chart");
  const MINUTE = 60000;
  const end = Math.floor(Date.parse(stats.as_of || stats.now) / MINUTE) * MINUTE;
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
