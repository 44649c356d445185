// What the admin dashboard's modules share: element lookup, throttling, admin
// requests (a 401 hands over to the sign-in form) and small renderers.

import { api, h, shown } from "./api.js";

export const $ = (id) => document.getElementById(id);

const pending = {}; // throttled refreshes by name

// At most one run of fn per `ms` for a name, however many events ask for it.
export function soon(name, fn, ms = 400) {
  if (pending[name]) return;
  pending[name] = setTimeout(() => {
    delete pending[name];
    fn();
  }, ms);
}

let unauthorized = () => {};

// Who shows the sign-in form when a session ends (admin-session.js).
export function onUnauthorized(fn) {
  unauthorized = fn;
}

const inFlight = new Set(); // admin requests under way

// An admin request; a 401 (no or expired session) shows the sign-in form.
export async function adminApi(path, options) {
  const request = api(path, options);
  inFlight.add(request);
  try {
    return await request;
  } catch (err) {
    if (err.status === 401) unauthorized();
    throw err;
  } finally {
    inFlight.delete(request);
  }
}

// No more admin requests: the throttled refreshes are dropped and those under
// way answered. Signing out waits for this, so that no request of the session
// reaches the server after it ends (its refusal would show in the console).
export async function quiesce() {
  for (const name of Object.keys(pending)) {
    clearTimeout(pending[name]);
    delete pending[name];
  }
  while (inFlight.size) await Promise.allSettled([...inFlight]);
}

export function badge(state) {
  return h("span", { class: "badge", "data-status": state }, state);
}

// "code: message"; at most `max` characters (a list row), the rest cut with
// an ellipsis: a message may be any length, and the detail shows it whole.
export function errorText(error, max = Infinity) {
  const text = error ? shown(`${error.code}: ${error.message}`) : "";
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
