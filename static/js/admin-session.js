// Admin dashboard: signing in with the token (traded for an HttpOnly session
// cookie, which EventSource sends), signing out, and what starts and stops
// with a session.

import { api, clearMessage, showError } from "./api.js";
import { $, onUnauthorized, quiesce } from "./admin-shared.js";
import { loadKindFilter } from "./admin-list.js";
import { startFlow } from "./admin-flow.js";
import { openFromAddress } from "./admin-detail.js";
import { connectEvents, disconnectEvents } from "./admin-live.js";
import { startStats, stopStats } from "./admin-stats.js";

function showSignIn() {
  disconnectEvents();
  stopStats();
  $("dashboard").hidden = true;
  $("signin").hidden = false;
  $("token").focus();
}

async function signIn(event) {
  event.preventDefault();
  const region = $("signin-error");
  clearMessage(region);
  const token = $("token").value;
  if (!token) {
    showError(region, new Error("Enter the admin token."));
    $("token").focus();
    return;
  }
  try {
    await api("/api/admin/session", { method: "POST", body: { token } });
  } catch (err) {
    showError(region, err);
    $("token").select();
    return;
  }
  $("token").value = "";
  $("signin").hidden = true;
  startDashboard();
  // The form that had the focus is hidden: the dashboard's first heading takes
  // it, so keyboard and screen reader users start where the new view does.
  $("counts-heading").focus();
}

function startDashboard() {
  $("signin").hidden = true;
  $("dashboard").hidden = false;
  loadKindFilter();
  startFlow();
  connectEvents(); // its "ready" event loads jobs, stats and the selected job
  startStats();
  openFromAddress();
}

async function signOut() {
  // Nothing of the dashboard asks anything more: its stream (whose first
  // event loads the open job) and timers stop, requests under way finish.
  disconnectEvents();
  stopStats();
  await Promise.race([quiesce(), new Promise((resolve) => setTimeout(resolve, 2000))]); // not for ever
  try {
    await api("/api/admin/session", { method: "DELETE" });
  } catch {
    // Signed out or not, show the form.
  }
  // A fresh page: no admin data stays behind in the hidden dashboard (it
  // starts at the sign-in form, the session cookie being gone).
  location.replace(location.pathname);
}

export function listenToSession() {
  onUnauthorized(showSignIn);
  $("signin").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
}

export async function start() {
  // A session cookie from before signs in: no form needed. Asking answers 200
  // either way, so the browser's console shows no failed request.
  let signedIn = true;
  try {
    signedIn = (await api("/api/admin/session")).data.signed_in;
  } catch {
    // Unreachable now: the dashboard's own requests will say so.
  }
  if (signedIn) startDashboard();
  else showSignIn();
}
