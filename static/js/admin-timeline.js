// Admin dashboard: one job's attempts on a time line, plain SVG. Queued from
// creation to the first start, then each attempt from its start to its end (or
// now, while it runs), coloured by outcome; the gaps between them are the
// backoffs and waits before the next claim.

const NS = "http://www.w3.org/2000/svg";
const COLORS = { completed: "#1f7a3a", running: "#2563eb", released: "#93c5fd" };
const FAILED = "#b3261e";

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

export function renderTimeline(box, job) {
  const log = (job.attempts_log || []).filter((a) => a.started_at);
  const start = Date.parse(job.created_at);
  const now = Date.now();
  const ends = log.map((a) => (a.finished_at ? Date.parse(a.finished_at) : now));
  const end = Math.max(start + 1, job.finished_at ? Date.parse(job.finished_at) : now, ...ends);
  const width = Math.max(240, box.clientWidth), height = 44;
  const x = (t) => 4 + ((t - start) / (end - start)) * (width - 8);
  const seconds = (ms) => `${(ms / 1000).toFixed(ms < 10000 ? 2 : 0)} s`;
  const firstStart = log.length ? Date.parse(log[0].started_at) : end;
  const summary = `Queued ${seconds(firstStart - start)}, then ${log.length} attempt(s): `
    + (log.map((a) => a.outcome || "running").join(", ") || "none yet");
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": summary });
  root.append(svg("title", {}, summary));
  const queued = svg("rect", { x: x(start), y: 14, height: 10, width: Math.max(1, x(firstStart) - x(start)),
    fill: "#d1d5db", "data-part": "queued" });
  queued.append(svg("title", {}, `queued ${seconds(firstStart - start)}`));
  root.append(queued);
  log.forEach((a, i) => {
    const from = Date.parse(a.started_at);
    const outcome = a.outcome || "running";
    const bar = svg("rect", { x: x(from), y: 10, height: 18, width: Math.max(2, x(ends[i]) - x(from)),
      fill: COLORS[outcome] || FAILED, "data-part": "attempt", "data-outcome": outcome });
    bar.append(svg("title", {}, `attempt ${a.attempt} (generation ${a.generation}) on ${a.worker_id || "?"}: `
      + `${outcome}, ${seconds(ends[i] - from)}`));
    root.append(bar);
  });
  root.append(svg("text", { x: 4, y: height - 2 }, "created"));
  root.append(svg("text", { x: width - 4, y: height - 2, "text-anchor": "end" }, seconds(end - start)));
  box.replaceChildren(root);
}
