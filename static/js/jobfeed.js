// jobfeed's browser client: submit a job, then follow it live until it ends.
// No build step, no dependency: import it from wherever jobfeed is served.
//
//   import { submitJob, followJob } from "/jobs/static/js/jobfeed.js";
//
//   const job = await submitJob("demo", "video-42", { steps: 8 });
//   const follow = followJob(job.id, {
//     onUpdate: (view) => render(view),            // every change of the public view, in order
//     onConnection: (state) => showState(state),   // "connecting", "live", "reconnecting", "ended"
//   });
//   const final = await follow.done;               // the view once completed, failed or canceled
//
// The module finds the API next to itself (two folders up from this file), so
// it works wherever jobfeed is mounted (/, /jobs, ...) with no configuration.
// Same origin only: EventSource and the JSON calls send the page's cookies.

import { TERMINAL } from "./states.js";

export { TERMINAL };

// Where jobfeed is mounted: ".../static/js/jobfeed.js" -> ".../".
export const BASE = new URL("../../", import.meta.url);

// A path of jobfeed's ("api/kinds", "/jobs/<id>") as a URL under its mount.
export function url(path) {
  return new URL(String(path).replace(/^\/+/, ""), BASE).href;
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status; // 0 when the server could not be reached
    this.code = code;     // the API's error code, e.g. "unknown_kind"
  }
}

// fetch() one of jobfeed's JSON endpoints. Resolves to {status, data}; rejects
// with ApiError on a network failure or any non-2xx answer.
export async function request(path, { method = "GET", body, headers = {} } = {}) {
  const init = { method, headers: { Accept: "application/json", ...headers }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url(path), init);
  } catch {
    throw new ApiError(0, "network_error", "Could not reach the server. Check the connection and try again.");
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(
      response.status,
      error.code || `http_${response.status}`,
      error.message || response.statusText || "The server answered with an error.",
    );
  }
  return { status: response.status, data };
}

// Submit a job. Resolves to its public view plus "deduplicated" (true when an
// unfinished job of that kind and target existed: you share it). `token` is
// JOBFEED_API_TOKEN when the server requires one.
export async function submitJob(kind, target, payload, { token } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const body = payload === undefined ? { kind, target } : { kind, target, payload };
  const { data } = await request("api/jobs", { method: "POST", body, headers });
  return data;
}

// Submit a job with files (multipart/form-data): `files` maps each input's
// name to a Blob or File, read by the handler as ctx.open_input(name).
// onProgress(sent, total) reports the upload (fetch cannot, hence XHR).
export function submitJobWithFiles(kind, target, payload, files, { token, onProgress } = {}) {
  const form = new FormData();
  const body = payload === undefined ? { kind, target } : { kind, target, payload };
  form.append("job", new Blob([JSON.stringify(body)], { type: "application/json" }));
  for (const [name, file] of Object.entries(files)) form.append(name, file, file.name || name);
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", url("api/jobs"));
    xhr.setRequestHeader("Accept", "application/json");
    if (token) xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    if (onProgress) xhr.upload.addEventListener("progress", (e) => onProgress(e.loaded, e.total));
    xhr.addEventListener("error", () => reject(
      new ApiError(0, "network_error", "Could not reach the server. Check the connection and try again.")));
    xhr.addEventListener("load", () => {
      let data = null;
      try {
        data = xhr.responseText ? JSON.parse(xhr.responseText) : null;
      } catch {
        data = null;
      }
      if (xhr.status >= 200 && xhr.status < 300) {
        resolve(data);
        return;
      }
      const error = (data && data.error) || {};
      reject(new ApiError(xhr.status, error.code || `http_${xhr.status}`,
                          error.message || xhr.statusText || "The server answered with an error."));
    });
    xhr.send(form);
  });
}

// requestId: one of the job's request ids, which JOBFEED_JOB_ACCESS=requesters
// asks of whoever reads a private job (an identity set by a proxy also does).
export async function getJob(id, requestId = null) {
  const headers = requestId ? { "X-Jobfeed-Request": requestId } : {};
  return (await request(`api/jobs/${encodeURIComponent(id)}`, { headers })).data;
}

// The job's page in jobfeed's UI.
export function jobPageUrl(id) {
  return url(`jobs/${encodeURIComponent(id)}`);
}

// Follow a job over server-sent events until it reaches a final status.
// The browser reconnects by itself after a dropped connection (and the server
// then sends the current view, so nothing is missed); when the server refuses
// the stream, the job is read once to learn why, and the stream is retried
// after retryMs. Views never go backwards: an older version is dropped.
// (A view of the same version may come again when only its position or
// requesters changed.)
// Returns {close(), done}: done resolves with the final view, or rejects with
// ApiError (status 404) for an unknown job; close() stops following (done then
// stays pending). requestId: as for getJob (EventSource sends no headers, so
// the stream gets it as ?request=).
export function followJob(id, { onUpdate = () => {}, onConnection = () => {}, retryMs = 3000,
                                requestId = null } = {}) {
  let source = null;
  let timer = null;
  let ended = false;
  let version = -Infinity;
  let resolve;
  let reject;
  const done = new Promise((ok, fail) => { resolve = ok; reject = fail; });
  done.catch(() => {}); // a caller that only uses callbacks need not await it

  function stop() {
    ended = true;
    clearTimeout(timer);
    if (source) source.close();
  }

  function deliver(view) {
    if (ended || view.version < version) return;
    version = view.version;
    onUpdate(view);
    if (TERMINAL.has(view.status)) {
      stop();
      onConnection("ended");
      resolve(view);
    }
  }

  function connect() {
    // After a refusal this is a new EventSource: tell the server what we have,
    // so it skips a first view we already showed (the browser does this itself
    // when it reconnects after a drop).
    const query = new URLSearchParams();
    if (Number.isFinite(version)) query.set("last_event_id", version);
    if (requestId) query.set("request", requestId);
    const search = query.toString() ? `?${query}` : "";
    source = new EventSource(url(`api/jobs/${encodeURIComponent(id)}/events${search}`));
    source.addEventListener("open", () => onConnection("live"));
    source.addEventListener("job", (event) => deliver(JSON.parse(event.data)));
    source.addEventListener("error", refused);
  }

  async function refused() {
    if (ended) return;
    if (source.readyState === EventSource.CONNECTING) {
      onConnection("reconnecting"); // a drop: the browser retries by itself
      return;
    }
    source.close(); // refused (404 for an unknown id, 204 once final): ask why
    try {
      const view = await getJob(id, requestId);
      if (view.version > version) deliver(view);
    } catch (err) {
      if (err.status === 404) {
        stop();
        onConnection("ended");
        reject(err);
        return;
      }
    }
    if (ended) return;
    onConnection("reconnecting");
    timer = setTimeout(connect, retryMs);
  }

  onConnection("connecting");
  connect();
  return { close: stop, done };
}
