// Admin dashboard /admin: sign in with the token (an HttpOnly cookie), then
// live counts, a throughput chart, recent jobs with their true state, and one
// job's detail with retry / cancel. /api/admin/events keeps it all current.
//
// One module per concern, plain ES modules: admin-session.js (sign-in and what
// a session starts), admin-list.js (the table and its filters),
// admin-detail.js (one job, retry, cancel), admin-stats.js (counts and chart),
// admin-live.js (the event stream), admin-flow.js (kinds, pause, schedules,
// bulk actions), admin-shared.js (what they share).

import { listenToDetail } from "./admin-detail.js";
import { listenToFlow } from "./admin-flow.js";
import { listenToFilters } from "./admin-list.js";
import { listenToSession, start } from "./admin-session.js";
import { fitChart } from "./admin-stats.js";

listenToSession();
listenToFilters();
listenToDetail();
listenToFlow();
fitChart();
start();
