// Admin dashboard: the workers panel. Each worker process beats into
// jobfeed.workers every third of its lease; one silent for two leases is lost.

import { clearMessage, h, showError, timeEl } from "./api.js";
import { $, adminApi } from "./admin-shared.js";

export async function loadWorkers() {
  try {
    const { data } = await adminApi("/api/admin/workers");
    clearMessage($("workers-error"));
    renderWorkers(data.workers || []);
  } catch (err) {
    if (err.status !== 401) showError($("workers-error"), err);
  }
}

function renderWorkers(workers) {
  const live = workers.filter((w) => !w.lost);
  $("workers-summary").textContent =
    `${live.length} live, ${workers.length - live.length} lost; `
    + `${live.reduce((n, w) => n + w.running, 0)} running of ${live.reduce((n, w) => n + w.concurrency, 0)} slots.`;
  const rows = workers.map((w) => h("tr", { "data-worker": w.id, class: w.lost ? "lost" : null },
    h("th", { scope: "row" }, w.id),
    h("td", { "data-label": "host" }, w.host),
    h("td", { "data-label": "kinds" }, w.kinds.join(", ")),
    h("td", { class: "num", "data-label": "running", "data-field": "running" }, String(w.running)),
    h("td", { class: "num", "data-label": "concurrency", "data-field": "concurrency" }, String(w.concurrency)),
    h("td", { "data-label": "last seen" }, timeEl(w.last_seen)),
    h("td", { "data-label": "status", "data-field": "status" }, w.lost ? "lost" : "live")));
  if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No workers seen in the last hour.")));
  $("workers").tBodies[0].replaceChildren(...rows);
}
