// Admin dashboard: /api/admin/events keeps the table, the stats and the open
// job current; after a (re)connect everything is re-read, so nothing missed
// while disconnected stays missing.

import { $, adminApi, soon } from "./admin-shared.js";
import { jobs, loadJobs, matchesFilters, remember, renderJobs } from "./admin-list.js";
import { loadDetail, selectedJobId } from "./admin-detail.js";
import { loadStats } from "./admin-stats.js";
import { DATABASE_PAUSED, url, watchDatabase } from "./api.js";

const RETRY_MS = 3000;
const CONNECTION = {
  live: "Live: changes appear as they happen.",
  reconnecting: "Connection lost: reconnecting…",
};

let source = null;
let stream = "reconnecting"; // the event stream's state
let databaseUp = true;
let stopWatching = null; // watching the database, from the stream's first open to signing out

export function disconnectEvents() {
  if (source) source.close();
  source = null;
  if (stopWatching) stopWatching();
  stopWatching = null;
  databaseUp = true;
}

function setConnection(state) {
  stream = state;
  const el = $("connection");
  el.dataset.state = databaseUp ? state : "paused";
  el.textContent = databaseUp ? CONNECTION[state] : DATABASE_PAUSED;
}

function opened() {
  if (!stopWatching) {
    stopWatching = watchDatabase((up) => {
      databaseUp = up;
      setConnection(stream);
    });
  }
  setConnection("live");
}

export function connectEvents() {
  if (source) source.close();
  source = new EventSource(url("api/admin/events"));
  source.addEventListener("open", opened);
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
    if (job.id === selectedJobId()) soon("detail", loadDetail, 200);
    soon("stats", loadStats, 1000);
  });
  source.addEventListener("error", async () => {
    if (source.readyState === EventSource.CONNECTING) {
      setConnection("reconnecting");
      return;
    }
    // Refused (e.g. the session expired): adminApi shows the sign-in on a 401.
    source.close();
    setConnection("reconnecting");
    try {
      await adminApi("/api/admin/stats");
    } catch (err) {
      if (err.status === 401) return;
    }
    setTimeout(() => { if (!$("dashboard").hidden) connectEvents(); }, RETRY_MS);
  });
}
