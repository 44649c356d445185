// Admin dashboard: the last hour's charts, plain SVG. Queue depth by kind (the
// sweeper samples it each round), wait from due to claimed p50/p95 by kind, and
// failures by kind and code. Re-read with the counts.

import { clearMessage, formatSeconds, h, showError } from "./api.js";
import { $, adminApi } from "./admin-shared.js";

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2"];

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

export async function loadCharts() {
  try {
    const { data } = await adminApi("/api/admin/charts");
    clearMessage($("charts-error"));
    renderDepth(data);
    renderWait(data.wait || []);
    renderFailures(data.failures || []);
  } catch (err) {
    if (err.status !== 401) showError($("charts-error"), err);
  }
}

function renderDepth(data) {
  const box = $("depth-chart");
  const samples = data.depth || [];
  const kinds = [...new Set(samples.map((s) => s.kind))].sort();
  const end = Date.parse(data.now);
  const start = end - 3600_000;
  const peak = Math.max(1, ...samples.map((s) => s.queued));
  const width = Math.max(240, box.clientWidth), height = 160;
  const pad = { left: 36, right: 6, top: 8, bottom: 22 };
  const x = (t) => pad.left + ((t - start) / (end - start)) * (width - pad.left - pad.right);
  const y = (n) => pad.top + (height - pad.top - pad.bottom) * (1 - n / peak);
  const latest = kinds.map((k) => {
    const mine = samples.filter((s) => s.kind === k);
    return `${k} ${mine.length ? mine[mine.length - 1].queued : 0}`;
  });
  const summary = kinds.length ? `Queued now by kind: ${latest.join(", ")}; peak ${peak}.` : "No samples in the last hour.";
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": summary });
  root.append(svg("title", {}, summary));
  root.append(svg("line", { class: "axis", x1: pad.left, x2: width - pad.right, y1: y(0), y2: y(0) }));
  root.append(svg("text", { x: pad.left - 6, y: y(peak) + 4, "text-anchor": "end" }, String(peak)));
  root.append(svg("text", { x: pad.left - 6, y: y(0) + 4, "text-anchor": "end" }, "0"));
  root.append(svg("text", { x: pad.left, y: height - 6 }, "-60 min"));
  root.append(svg("text", { x: width - pad.right, y: height - 6, "text-anchor": "end" }, "now"));
  kinds.forEach((k, i) => {
    const points = samples.filter((s) => s.kind === k).map((s) => `${x(Date.parse(s.at))},${y(s.queued)}`);
    root.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: COLORS[i % COLORS.length],
      "stroke-width": 2, "data-kind": k }));
  });
  box.replaceChildren(root);
  $("depth-legend").replaceChildren(...kinds.map((k, i) => {
    const swatch = svg("svg", { width: 12, height: 12, viewBox: "0 0 12 12" });
    swatch.append(svg("rect", { width: 12, height: 12, rx: 2, fill: COLORS[i % COLORS.length] }));
    return h("li", {}, swatch, ` ${k}`);
  }));
}

function renderWait(rows) {
  const body = $("wait-table").tBodies[0];
  const peak = Math.max(0.001, ...rows.map((r) => r.p95));
  body.replaceChildren(...rows.map((r) => h("tr", { "data-kind": r.kind },
    h("th", { scope: "row" }, r.kind),
    h("td", { class: "num", "data-field": "p50", "data-value": r.p50.toFixed(3) }, wait(r.p50)),
    h("td", { class: "num", "data-field": "p95", "data-value": r.p95.toFixed(3) }, wait(r.p95)),
    h("td", { class: "bar-cell" }, bar(r.p95 / peak, r.p50 / peak)),
    h("td", { class: "num", "data-field": "jobs" }, String(r.jobs)))));
  if (!rows.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No finished jobs in the last hour.")));
}

function renderFailures(rows) {
  const body = $("failures-table").tBodies[0];
  const peak = Math.max(1, ...rows.map((r) => r.jobs));
  body.replaceChildren(...rows.map((r) => h("tr", { "data-kind": r.kind, "data-code": r.code },
    h("th", { scope: "row" }, `${r.kind} · ${r.code}`),
    h("td", { class: "bar-cell" }, bar(r.jobs / peak)),
    h("td", { class: "num", "data-field": "jobs" }, String(r.jobs)))));
  if (!rows.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 3, class: "muted" }, "No failures in the last hour.")));
}

function wait(seconds) {
  return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : formatSeconds(seconds);
}

// A horizontal bar (0..1), with an optional marker (the p50 inside the p95).
function bar(fraction, marker) {
  const root = svg("svg", { width: 120, height: 12, viewBox: "0 0 120 12", "aria-hidden": "true" });
  // fill as an attribute, not a style: the page's Content-Security-Policy allows no inline styles
  const color = marker === undefined ? "#b3261e" : "#93c5fd";
  root.append(svg("rect", { x: 0, y: 2, height: 8, width: Math.max(1, 120 * fraction), fill: color }));
  if (marker !== undefined) root.append(svg("rect", { x: 0, y: 2, height: 8, width: Math.max(1, 120 * marker), fill: "#2563eb" }));
  return root;
}
