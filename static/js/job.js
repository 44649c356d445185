// Job page /jobs/{id}: follows the job's public view with the public module's
// followJob (SSE, reconnects, final status) and draws it. The status shown is
// always the server's word.

import { DATABASE_PAUSED, prettyJson, shown, timeEl, watchDatabase } from "./api.js";
import { followJob, jobPageUrl, url } from "./jobfeed.js";

const jobId = decodeURIComponent(location.pathname.replace(/\/+$/, "").split("/").pop());
const $ = (id) => document.getElementById(id);
const statusBadge = $("status");
const progress = $("progress");
const connection = $("connection");
// This tab's request for the job (set by the submit page), if it has one.
const requestKey = `jobfeed.request.${jobId}`;
let requestId = sessionStorage.getItem(requestKey);
// Set when this page closed with a deferred leave asked for: the page that
// comes back in this tab (a reload, Back or Forward) calls it off.
const leavingKey = `jobfeed.leaving.${jobId}`;
// How long the server lets that leave wait (JOBFEED_LEAVE_GRACE); 0: at once.
const leaveGrace = Number(document.querySelector('meta[name="jobfeed-leave-grace"]')?.content) || 0;
const FINAL = new Set(["completed", "failed", "canceled"]);

function setConnection(state, text) {
  connection.dataset.state = state;
  connection.textContent = text;
}

function renderProgress(job) {
  const p = job.progress;
  progress.dataset.status = job.status;
  if (job.status === "completed") {
    const total = p && p.total > 0 ? p.total : 1;
    progress.max = total;
    progress.value = total;
  } else if (p && p.total > 0) {
    progress.max = p.total;
    progress.value = Math.min(p.done, p.total);
  } else if (job.status === "processing") {
    progress.removeAttribute("value"); // running, amount unknown: indeterminate
  } else {
    progress.max = 1;
    progress.value = 0;
  }
  const parts = [];
  if (p && p.total > 0) parts.push(`${p.done} of ${p.total} (${Math.round((100 * Math.min(p.done, p.total)) / p.total)}%)`);
  if (p && p.message) parts.push(shown(p.message));
  if (!parts.length) parts.push(job.status === "queued" ? queuedText(job) : job.status === "processing" ? "Working…" : "");
  // where it is in line (due and never started): refreshed by the server every few seconds
  if (job.status === "queued" && Number.isInteger(job.position)) {
    parts.push(job.position === 0 ? "Next in line." : `${job.position} ahead of you.`);
  }
  $("progress-text").textContent = parts.join(" · ");
}

// A job submitted for later says when (scheduled_for is the server's word,
// shown until that time comes); one due now waits for a worker.
function queuedText(job) {
  if (!job.scheduled_for) return "Waiting for a worker.";
  const at = new Date(job.scheduled_for);
  return `Scheduled for ${at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })}.`;
}

function render(job) {
  document.title = `${job.status} · ${job.kind} ${shown(job.target)} · jobfeed`;
  $("heading").textContent = `${job.kind}: ${shown(job.target)}`;
  if (statusBadge.textContent !== job.status) {
    statusBadge.textContent = job.status;
    statusBadge.dataset.status = job.status;
  }
  statusBadge.hidden = false;
  $("status-pending").hidden = true;
  renderProgress(job);

  $("result-panel").hidden = job.status !== "completed";
  if (job.status === "completed") $("result").textContent = prettyJson(job.result);
  $("error-panel").hidden = !(job.status === "failed" && job.error);
  if (job.error) $("error").textContent = `${shown(job.error.message)} (${shown(job.error.code)})`;
  $("canceled-note").hidden = job.status !== "canceled";
  renderOutputs(job.outputs || []);
  renderRequesters(job);

  $("kind").textContent = job.kind;
  $("target").textContent = shown(job.target);
  $("created").replaceChildren(timeEl(job.created_at));
  $("updated").replaceChildren(timeEl(job.updated_at));
  $("finished").replaceChildren(timeEl(job.finished_at));
  $("job-id").textContent = job.id;
}

function formatSize(bytes) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let n = bytes;
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${n} ${n === 1 ? "byte" : "bytes"}` : `${n.toFixed(1)} ${units[unit]}`;
}

// Files the handler saved: download links. The link itself never carries this
// tab's request id (JOBFEED_JOB_ACCESS=requesters asks for it, and it opens the
// job for whoever holds it: a copied link must not); a click sends it as the
// X-Jobfeed-Request header and saves what comes back.
async function downloadWithRequest(event, href, name) {
  if (!requestId) return; // the plain link downloads
  event.preventDefault();
  const response = await fetch(href, { headers: { "X-Jobfeed-Request": requestId } });
  if (!response.ok) {
    setConnection("error", `Could not download ${name} (${response.status}).`);
    return;
  }
  const saved = document.createElement("a");
  saved.href = URL.createObjectURL(await response.blob());
  saved.download = name;
  saved.click();
  setTimeout(() => URL.revokeObjectURL(saved.href), 60_000);
}

function renderOutputs(outputs) {
  const key = JSON.stringify(outputs);
  const list = $("outputs");
  if (list.dataset.key === key) return;
  list.dataset.key = key;
  list.replaceChildren(...outputs.map((o) => {
    const link = document.createElement("a");
    link.href = url(`api/jobs/${encodeURIComponent(jobId)}/outputs/${encodeURIComponent(o.name)}`);
    link.download = o.name;
    link.addEventListener("click", (event) => downloadWithRequest(event, link.href, o.name));
    link.textContent = shown(o.name);
    const item = document.createElement("li");
    const about = document.createElement("span");
    about.className = "muted small";
    about.textContent = ` ${formatSize(o.size)} · ${o.content_type}`;
    item.append(link, about);
    return item;
  }));
  $("outputs-panel").hidden = outputs.length === 0;
}

function renderRequesters(job) {
  const line = $("requesters");
  const n = job.requesters || 0;
  const live = !FINAL.has(job.status);
  $("leave-row").hidden = !(requestId && live);
  if (!live || (!requestId && n === 0)) {
    line.hidden = true;
    return;
  }
  const others = requestId ? n - 1 : n;
  line.textContent = requestId
    ? (others > 0 ? `Shared with ${others} other${others === 1 ? "" : "s"}.` : "Only you are waiting for this job.")
    : `${n} ${n === 1 ? "person is" : "people are"} waiting for this job.`;
  line.hidden = false;
}

function leaveUrl() {
  return url(`api/requests/${encodeURIComponent(requestId)}/leave`);
}

function forget() {
  sessionStorage.removeItem(requestKey);
  sessionStorage.removeItem(leavingKey);
  requestId = null;
  $("leave-row").hidden = true;
}

async function leave() {
  const button = $("leave");
  button.disabled = true;
  try {
    const response = await fetch(leaveUrl(), { method: "POST" });
    if (response.ok || response.status === 404) {
      forget(); // (the Leave button goes: focus moves to what says it worked)
      $("left-note").hidden = false;
      $("left-note").focus();
      const data = response.ok ? await response.json() : null;
      if (data && data.job) render(data.job);
    }
  } finally {
    button.disabled = false;
  }
}

// Back in this tab after closing with a leave asked for: it is called off,
// unless it was applied meanwhile (the page was away longer than the grace).
// The closing page's beacon may reach the server after this page's first
// ask (nothing pending yet, called_off false): asked again a little later.
const STAY_AGAIN_MS = [300, 1000, 2000, 4000];

async function stay(round = 0) {
  let response;
  try {
    response = await fetch(url(`api/requests/${encodeURIComponent(requestId)}/stay`), { method: "POST" });
  } catch {
    return; // unreachable: the page says so (the stream); the next load asks again
  }
  if (response.status === 409 || response.status === 404) {
    forget();
    $("left-note").hidden = false;
  } else if (response.ok) {
    const data = await response.json();
    if (!data.called_off && round < STAY_AGAIN_MS.length) {
      setTimeout(() => { if (requestId) stay(round + 1); }, STAY_AGAIN_MS[round]);
    } else {
      sessionStorage.removeItem(leavingKey);
    }
  }
}

function setUpLeaving() {
  $("leave").addEventListener("click", leave);
  // Closing the tab leaves too: a beacon survives the page. A reload or going
  // Back closes it just the same, so the beacon asks to leave after the grace
  // and the page that comes back calls that off (stay). Following one of our
  // own links does not leave: the person is still here, maybe to submit this
  // target again, which joins the job. A finished job has nobody to leave.
  let following = false;
  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[href]");
    if (link && link.origin === location.origin && !link.hasAttribute("download")) {
      following = true;
      setTimeout(() => { following = false; }, 2000);  // the click opened no page here
    }
  });
  addEventListener("pagehide", () => {
    if (!following && requestId && statusBadge.dataset.status && !FINAL.has(statusBadge.dataset.status)) {
      if (leaveGrace > 0) {
        navigator.sendBeacon(`${leaveUrl()}?grace=${leaveGrace}`);
        sessionStorage.setItem(leavingKey, "1");
      } else {
        navigator.sendBeacon(leaveUrl());
        forget();
      }
    }
  });
  // kept whole in the back/forward cache: no new load, but the leave was asked for
  addEventListener("pageshow", (event) => {
    if (event.persisted && requestId && sessionStorage.getItem(leavingKey)) stay();
  });
  if (requestId && sessionStorage.getItem(leavingKey)) stay();
}

function showNotFound() {
  $("job").hidden = true;
  $("shared-note").hidden = true;
  $("heading").textContent = "No such job";
  document.title = "No such job · jobfeed";
  const box = $("not-found");
  box.replaceChildren(
    `There is no job with the id “${jobId}”. Check the link; a finished job is also deleted `
    + "after the retention period (7 days by default).");
  box.hidden = false;
}

const CONNECTION = {
  connecting: "Connecting…",
  live: "Live: updates appear as they happen.",
  reconnecting: "Connection lost: reconnecting…",
};

let stream = "connecting"; // the event stream's state, as followJob reports it
let databaseUp = true;
let stopWatching = null; // watching the database, from the stream's first "live" to the job's end

function showConnection() {
  if (databaseUp) setConnection(stream, CONNECTION[stream]);
  else setConnection("paused", DATABASE_PAUSED);
}

function follow() {
  const following = followJob(jobId, {
    requestId, // a private job (JOBFEED_JOB_ACCESS=requesters) is shown to its requesters only
    onUpdate: render,
    onConnection: (state) => {
      if (state === "ended") {
        if (stopWatching) stopWatching();
        return;
      }
      stream = state;
      if (state === "live" && !stopWatching) {
        stopWatching = watchDatabase((up) => {
          databaseUp = up;
          showConnection();
        });
      }
      showConnection();
    },
  });
  following.done.then(
    (job) => setConnection("finished", `The job ended: ${job.status}. Live updates stopped.`),
    (err) => {
      if (err.status === 404) showNotFound();
    },
  );
}

// Under JOBFEED_JOB_ACCESS=requesters (the server names the mode in a meta
// tag) the link shows the job to its requesters only: anyone else sees "No
// such job". The page's own text is the default mode's.
const SHARE_NOTE = {
  requesters: "Only the people who asked for this job can watch it: the link does not open it for anyone else.",
};

function setUpSharing() {
  const mode = document.querySelector('meta[name="jobfeed-job-access"]')?.content;
  if (SHARE_NOTE[mode]) $("share-note").textContent = SHARE_NOTE[mode];
  const url = jobPageUrl(jobId);
  const input = $("share-url");
  input.value = url;
  input.addEventListener("focus", () => input.select());
  $("copy").addEventListener("click", async () => {
    const status = $("copy-status");
    try {
      await navigator.clipboard.writeText(url);
      status.textContent = "Link copied.";
    } catch {
      input.focus();
      input.select();
      status.textContent = document.execCommand && document.execCommand("copy")
        ? "Link copied."
        : "Copying is blocked here: the link is selected, press Ctrl+C to copy it.";
    }
  });
}

$("job-id").textContent = jobId;
$("shared-note").hidden = new URLSearchParams(location.search).get("shared") !== "1";
setUpSharing();
setUpLeaving();
follow();
