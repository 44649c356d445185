// Submit page: choose a kind, enter a target and an optional JSON payload,
// POST /api/jobs, then go to the job's page (marked shared when deduplicated).

import { api, clearMessage, h, showError } from "./api.js";
import { jobPageUrl, submitJob, submitJobWithFiles, url } from "./jobfeed.js";

const form = document.getElementById("submit-form");
const kindSelect = document.getElementById("kind");
const kindHelp = document.getElementById("kind-help");
const target = document.getElementById("target");
const payload = document.getElementById("payload");
const payloadError = document.getElementById("payload-error");
const formError = document.getElementById("form-error");
const submitButton = document.getElementById("submit");
const submitStatus = document.getElementById("submit-status");
const fileInput = document.getElementById("files");
const uploadProgress = document.getElementById("upload-progress");

let kinds = [];

function describeKind() {
  const kind = kinds.find((k) => k.kind === kindSelect.value);
  if (!kind) {
    kindHelp.textContent = "";
    return;
  }
  const settings = `Up to ${kind.max_attempts} attempts, lease ${kind.lease_seconds} s.`;
  const description = kind.description ? kind.description.replace(/\.?$/, ". ") : "";
  kindHelp.textContent = description + settings;
}

// Until kinds are listed (the database is away, or no worker has registered
// one yet), the page asks again on its own: nobody need reload it.
const KINDS_RETRY_MS = 3000;

async function loadKinds() {
  try {
    const { data } = await api("api/kinds");
    const listed = Array.isArray(data) ? data : (data && data.kinds) || [];
    // "jobfeed." names jobfeed's own kinds (a webhook's delivery), which no
    // one submits: the API refuses them, so the form does not offer them.
    kinds = listed.filter((k) => !k.kind.startsWith("jobfeed."));
  } catch (err) {
    kindSelect.replaceChildren(h("option", { value: "" }, "Could not load kinds"));
    showError(formError, err);
    setTimeout(loadKinds, KINDS_RETRY_MS);
    return;
  }
  clearMessage(formError);
  if (kinds.length === 0) {
    kindSelect.replaceChildren(h("option", { value: "" }, "No kinds registered"));
    kindHelp.textContent = "No kind of job is registered yet: start a worker (jobfeed worker).";
    setTimeout(loadKinds, KINDS_RETRY_MS);
    return;
  }
  const wanted = new URLSearchParams(location.search).get("kind");
  kindSelect.replaceChildren(...kinds.map((k) => h("option", { value: k.kind }, k.kind)));
  if (wanted && kinds.some((k) => k.kind === wanted)) kindSelect.value = wanted;
  kindSelect.disabled = false;
  describeKind();
}

function setPayloadError(text) {
  payload.setAttribute("aria-invalid", text ? "true" : "false");
  payloadError.textContent = text || "";
  payloadError.hidden = !text;
}

// The payload as an object, or undefined when empty. Throws a message for the user.
function readPayload() {
  const text = payload.value.trim();
  if (!text) return undefined;
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`The payload is not valid JSON: ${err.message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error('The payload must be a JSON object, like {"steps": 4}.');
  }
  return value;
}

// With files: one multipart request, its progress shown as it goes.
async function upload(body) {
  const files = {};
  for (const file of fileInput.files) files[file.name] = file;
  uploadProgress.hidden = false;
  uploadProgress.value = 0;
  try {
    return await submitJobWithFiles(body.kind, body.target, body.payload, files, {
      onProgress: (sent, total) => {
        uploadProgress.max = total || 1;
        uploadProgress.value = sent;
        submitStatus.textContent = `Uploading… ${total ? Math.round((100 * sent) / total) : 0}%`;
      },
    });
  } finally {
    uploadProgress.hidden = true;
  }
}

// A tab holds one request per job: submitting a target it already waits for
// (a second submission from "Submit another job") joins with a new request,
// so the one held before leaves (its page's beacon would leave only the new
// one, and the job would wait for nobody).
function holdRequest(jobId, requestId) {
  const key = `jobfeed.request.${jobId}`;
  const held = sessionStorage.getItem(key);
  sessionStorage.setItem(key, requestId);
  if (held && held !== requestId) {
    fetch(url(`api/requests/${encodeURIComponent(held)}/leave`), { method: "POST", keepalive: true }).catch(() => {});
  }
}

async function submit(event) {
  event.preventDefault();
  clearMessage(formError);
  setPayloadError("");
  target.setAttribute("aria-invalid", "false");

  if (!kindSelect.value) {
    kindSelect.focus();
    showError(formError, new Error("Choose a kind of job."));
    return;
  }
  if (!target.value.trim()) {
    target.setAttribute("aria-invalid", "true");
    showError(formError, new Error("Enter a target."));
    target.focus();
    return;
  }
  let body;
  try {
    body = { kind: kindSelect.value, target: target.value.trim(), payload: readPayload() };
  } catch (err) {
    setPayloadError(err.message); // announced: the message is an alert beside the field
    payload.focus();
    return;
  }

  submitButton.disabled = true;
  submitStatus.textContent = "Submitting…";
  try {
    const data = fileInput.files.length ? await upload(body) : await submitJob(body.kind, body.target, body.payload);
    // This tab's request: the job page leaves it when the tab closes. Kept out of
    // the URL, which is for sharing (a request id lets its holder leave).
    if (data.request_id) holdRequest(data.id, data.request_id);
    submitStatus.textContent = data.deduplicated ? "Joining the existing job…" : "Submitted. Opening the job…";
    const page = jobPageUrl(data.id);
    location.assign(data.deduplicated ? `${page}?shared=1` : page);
  } catch (err) {
    submitStatus.textContent = "";
    showError(formError, err);
    formError.focus();
    submitButton.disabled = false;
  }
}

kindSelect.addEventListener("change", describeKind);
payload.addEventListener("input", () => setPayloadError(""));
payload.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
});
form.addEventListener("submit", submit);
formError.tabIndex = -1;
// Coming back to this page from history (back button): the form is usable again.
window.addEventListener("pageshow", () => {
  submitButton.disabled = false;
  submitStatus.textContent = "";
});
loadKinds();
