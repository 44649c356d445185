// Shared by jobfeed's own pages: the public module's requests and URLs, error
// display, DOM building and formatting.

// The JSON calls and URLs come from the public module; paths like
// "/api/kinds" resolve under wherever jobfeed is mounted.
export { ApiError, TERMINAL, request as api, url } from "./jobfeed.js";
import { ApiError, url } from "./jobfeed.js";

// While the API cannot reach its database, its event streams stay open (their
// heartbeats go on) and carry nothing, so "Live" would be untrue: a page that
// shows it asks api/live every few seconds whether the API's live feed is
// connected (answered from memory). The stream's own events stay as they are.
export const DATABASE_PAUSED = "Database unreachable: updates are paused.";
const READY_EVERY_MS = 5000;

// watchDatabase(onChange) -> stop(). onChange(false) once api/live says the
// feed's connection to the database is down, onChange(true) once it is back. One request at a time, only while the page is seen; an answer
// that says neither (no answer: the stream reports a lost API itself)
// changes nothing.
export function watchDatabase(onChange) {
  let up = true;
  let timer = null;
  let stopped = false;
  const check = async () => {
    const now = document.hidden ? null : await databaseUp();
    if (stopped) return;
    if (now !== null && now !== up) {
      up = now;
      onChange(up);
    }
    timer = setTimeout(check, READY_EVERY_MS);
  };
  timer = setTimeout(check, READY_EVERY_MS);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

async function databaseUp() {
  try {
    const response = await fetch(url("api/live"), { headers: { Accept: "application/json" }, cache: "no-store" });
    const { live } = await response.json();
    return typeof live === "boolean" ? live : null;
  } catch {
    return null;
  }
}

// Show an error in a region (role="alert" in the page): what went wrong in
// words, then the status and code for anyone reporting it.
export function showError(region, err) {
  const detail = err instanceof ApiError && err.status
    ? ` (HTTP ${err.status}, ${err.code})`
    : err instanceof ApiError ? ` (${err.code})` : "";
  region.replaceChildren(h("strong", {}, "Error: "), err.message, h("span", { class: "muted" }, detail));
  region.className = "message error";
  region.hidden = false;
}

export function showNote(region, text) {
  region.replaceChildren(text);
  region.className = "message ok";
  region.hidden = false;
}

export function clearMessage(region) {
  region.replaceChildren();
  region.hidden = true;
}

// h("a", {href: "/x", class: "y"}, "text", child) -> element. Strings become
// text nodes (never HTML); null/false children are skipped.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) el.append(child);
  }
  return el;
}

export function formatTime(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay ? date.toLocaleTimeString() : date.toLocaleString();
}

export function formatSeconds(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(Number(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// Text a submitter chose (a target, a progress message, a file name), shown
// with its bidirectional controls written out (\u202e): one reverses what
// follows it, so "x\u202egnp.exe" would read as "x" and "exe.png".
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
export function shown(text) {
  return String(text ?? "").replace(BIDI_CONTROLS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

export function prettyJson(value) {
  return JSON.stringify(value, null, 2);
}

// A <time> element with the local time as text and the exact instant as title.
export function timeEl(iso) {
  return iso ? h("time", { datetime: iso, title: iso }, formatTime(iso)) : "—";
}
