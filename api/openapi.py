"""The OpenAPI 3 description of every route (a test checks it against the
routes list, so neither can drift from the other)."""

from __future__ import annotations

import importlib.metadata

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobfeed.worker.limits import MAX_NOTIFY_URL, MAX_TARGET_BYTES
from jobfeed.worker.states import STATES, STATUSES
from jobfeed.worker.tasks import DEDUPE, ON_ABANDON, ON_DUPLICATE

from .jobs import NOT_NULLABLE

_ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _err(description: str) -> dict:
    return _json(_ERROR, description)


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


_JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
_TIME = {"type": "string", "format": "date-time"}
_KIND = {"name": "kind", "in": "path", "required": True, "schema": {"type": "string"}}
_ADMIN: list[dict] = [{"bearer": []}, {"session": []}]
_UNAUTHORIZED = {"401": _err("no valid admin token or session")}
# What every JSON body may be refused for before it is looked at.
_BODY_ERRORS = {
    "400": _err("malformed JSON (invalid_json)"),
    "413": _err("the body is too large (payload_too_large)"),
    "415": _err("the body is not application/json or +json (unsupported_media_type)"),
}
# Cookie-authenticated writes from another origin (bearer requests are exempt).
_CSRF = {"403": _err("signed in by cookie, but the request did not come from this server's pages (csrf)")}
_TOO_MANY_STREAMS = {"429": _err("too many open streams from this client, or in this process (too_many_streams); "
                                 "see Retry-After")}
_REQUEST_ID = {"name": "request_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
# JOBFEED_JOB_ACCESS=requesters: how a caller shows it requested the job.
_PRESENTED = [{"name": "X-Jobfeed-Request", "in": "header", "schema": {"type": "string", "format": "uuid"},
               "description": "one of the job's request ids (JOBFEED_JOB_ACCESS=requesters)"},
              {"name": "request", "in": "query", "schema": {"type": "string", "format": "uuid"},
               "description": "the same, where headers cannot be sent (EventSource)"}]
_LEAVE = {
    "parameters": [_REQUEST_ID,
                   {"name": "grace", "in": "query", "schema": {"type": "string"},
                    "description": "leave after this long (a duration, 30s, or seconds; at most "
                                   "JOBFEED_LEAVE_GRACE, longer is clamped) unless the request stays first "
                                   "(POST /api/requests/{request_id}/stay): a closing page's deferred leave, "
                                   "which the page a reload brings back calls off. The request stays active "
                                   "meanwhile. 0, or a grace of 0 set on the server, leaves at once"}],
    "responses": {"200": _json({"type": "object", "required": ["job"], "properties": {
                      "job": _ref("JobView"),
                      "leave_at": {**_TIME, "nullable": True,
                                   "description": "with ?grace= only: when the request will leave; null when "
                                                  "it has left (at once, or before; at once too when "
                                                  "its job is already final)"}}},
                      "left (also when it had left before), or, with ?grace=, leaving at leave_at: the "
                      "job's public view"),
                  "404": _err("no such request"),
                  "422": _err("grace is not a duration (invalid_query)")}}
_SSE = {"description": "a stream of server-sent events", "content": {"text/event-stream": {"schema": {"type": "string"}}}}
_HTML = {"description": "a page of the web UI", "content": {"text/html": {"schema": {"type": "string"}}}}

OPERATIONS: dict[tuple[str, str], dict] = {
    ("POST", "/api/jobs"): {
        "summary": "Submit a job, deduplicated by (kind, target) (and the requester identity when the kind "
                   "has dedupe=\"requester\")",
        "security": [{}, {"bearer": []}],
        "description": "A duplicate of an unfinished job follows the kind's on_duplicate: join (share it), "
                       "reject_different (409 when the payload differs), rerun (a running job runs once more "
                       "afterwards with the newest payload) or replace (the running attempt is fenced out "
                       "and the job starts over with the new payload). Under rerun and replace a job not "
                       "running takes the newest payload. "
                       "As multipart/form-data: a part named job holding the JSON submission, and file "
                       "parts, each an input of the job under its part's name (1 to 200 bytes, no '/'; at "
                       "most 64), read by handlers with ctx.open_input(name). The whole body is at most "
                       "JOBFEED_MAX_UPLOAD (413); the files commit with the job, and a duplicate stores none.",
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": _ref("Submission")},
            "multipart/form-data": {"schema": {"type": "object", "required": ["job"], "properties": {
                "job": {**_ref("Submission")}}, "additionalProperties": {"type": "string", "format": "binary"}},
                "encoding": {"job": {"contentType": "application/json"}}}}},
        "responses": {
            "201": _json(_ref("SubmitResult"), "a new job; Location names it"),
            "200": _json(_ref("SubmitResult"), "an unfinished job already held the target (deduplicated: true), "
                                               "or a recent completion is reused (reused: true)"),
            **_BODY_ERRORS,
            "400": _err("malformed JSON (invalid_json) or multipart body (invalid_multipart)"),
            "401": _err("JOBFEED_API_TOKEN is set and the request lacks it"),
            "403": _err("a multipart upload from another origin (csrf)"),
            "409": _err("the kind rejects a duplicate with a different payload (payload_conflict)"),
            "413": _err("payload or body too large, or an upload over JOBFEED_MAX_UPLOAD (payload_too_large)"),
            "422": _err("invalid_request, unknown_kind, invalid_target, invalid_payload, invalid_run_at, "
                        "invalid_delay, invalid_priority, invalid_concurrency_key, notify_url_not_allowed, "
                        "unknown_dependency, invalid_file_name, invalid_content_type, too_many_files or "
                        "invalid_requester (an identity over 512 bytes)"),
            "429": _err("this requester already waits for JOBFEED_MAX_ACTIVE_PER_REQUESTER jobs "
                        "(too_many_jobs); see Retry-After"),
        }},
    ("GET", "/api/jobs/{job_id}"): {
        "summary": "A job's public view; with ?wait=, once it is final or the time is up",
        "parameters": [_JOB_ID,
                       {"name": "wait", "in": "query", "schema": {"type": "string"},
                        "description": "a duration (30s) or seconds; at most 60 s (longer is clamped)"},
                       *_PRESENTED],
        "responses": {"200": _json(_ref("JobView"), "the job"),
                      "404": _err("no such job (or, with JOBFEED_JOB_ACCESS=requesters, not yours)"),
                      "422": _err("wait is not a duration (invalid_query)")}},
    ("DELETE", "/api/requests/{request_id}"): {
        "summary": "Leave: this request no longer waits for its job (the last to leave abandons it)",
        **_LEAVE},
    ("POST", "/api/requests/{request_id}/leave"): {
        "summary": "Leave, as a POST without a body (a closing page's navigator.sendBeacon)", **_LEAVE},
    ("POST", "/api/requests/{request_id}/stay"): {
        "summary": "Stay: call off the request's pending deferred leave (?grace=), e.g. a job page that a "
                   "reload brought back",
        "parameters": [_REQUEST_ID],
        "responses": {"200": _json({"type": "object", "required": ["job", "called_off"], "properties": {
                                        "job": _ref("JobView"),
                                        "called_off": {"type": "boolean", "description": "a leave was pending "
                                                       "(false: none, or its request has not arrived yet)"}}},
                                   "the request is active with no leave pending: the job's public view"),
                      "404": _err("no such request"),
                      "409": _err("the request has left already, its deferred leave applied (request_left)")}},
    ("GET", "/api/jobs/{job_id}/events"): {
        "summary": "Server-sent events of a job's public view until it finishes",
        "description": "event: job, id: the view's version, data: the public view. The first event "
                       "is skipped when Last-Event-ID (header or ?last_event_id=) equals the current "
                       "version; ': ping' comments keep the connection open; the stream ends after a "
                       "completed, failed or canceled view.",
        "parameters": [_JOB_ID, {"name": "last_event_id", "in": "query", "schema": {"type": "integer"}},
                       {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer"}}, *_PRESENTED],
        "responses": {"200": _SSE, "204": {"description": "the client already has the final view"},
                      "404": _err("no such job"), **_TOO_MANY_STREAMS}},
    ("POST", "/api/jobs/{job_id}/signals/{name}"): {
        "summary": "Deliver a signal the job awaits (its await_signals); the first delivery wins",
        "description": "Needs the API token when JOBFEED_API_TOKEN is set, else admin rights. The body "
                       "(any JSON, optional) is what the handler reads in job.signals[name]. A repeat of "
                       "a name changes nothing and answers first: false.",
        "security": [{"bearer": []}, {"session": []}],
        "parameters": [_JOB_ID, {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
        "requestBody": {"required": False, "content": {"application/json": {"schema": {}}}},
        "responses": {
            "200": _json(_ref("SignalResult"), "the job's public view; first: whether this delivery counted"),
            **_BODY_ERRORS,
            "413": _err("the body, or its JSON text, is over JOBFEED_MAX_PAYLOAD (payload_too_large)"),
            "401": _err("the API token (or, with none set, admin rights) is missing"),
            "404": _err("no such job"),
            "409": _err("not_awaited: the job does not await this signal"),
            "422": _err("invalid_payload: JSON that PostgreSQL cannot store"),
        }},
    ("GET", "/api/jobs/{job_id}/outputs/{name}"): {
        "summary": "Download a file the job's handler saved (ctx.save_output)",
        "description": "Streamed, as an attachment. One byte range (Range: bytes=a-b, a-, -n) answers 206 "
                       "with Content-Range; several ranges or a malformed one are ignored (200); If-Range "
                       "takes the ETag. Same access rules as the job view.",
        "parameters": [_JOB_ID, {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "Range", "in": "header", "schema": {"type": "string"}},
                       {"name": "If-Range", "in": "header", "schema": {"type": "string"}}, *_PRESENTED],
        "responses": {
            "200": {"description": "the whole file, in the content type its handler gave",
                    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
            "206": {"description": "the range asked for; Content-Range says which",
                    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
            "404": _err("no such job or output (or, with JOBFEED_JOB_ACCESS=requesters, not yours)"),
            "416": _err("the range asks for no byte of the file (range_not_satisfiable); "
                        "Content-Range: bytes */size")}},
    ("GET", "/api/kinds"): {
        "summary": "Registered kinds and their settings",
        "responses": {"200": _json({"type": "object", "properties": {
            "kinds": {"type": "array", "items": _ref("Kind")}}}, "the kinds")}},
    ("GET", "/api/admin/jobs"): {
        "summary": "Jobs newest first, with true states",
        "security": _ADMIN,
        "parameters": [
            {"name": "state", "in": "query", "schema": {"type": "string", "enum": list(STATES)}},
            {"name": "kind", "in": "query", "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500,
                                                         "default": 50}},
            {"name": "cursor", "in": "query", "schema": {"type": "string"},
             "description": "next_cursor of the previous page"}],
        "responses": {"200": _json(_ref("JobsPage"), "a page of jobs"), **_UNAUTHORIZED,
                      "422": _err("a bad query parameter (invalid_query)")}},
    ("GET", "/api/admin/jobs/{job_id}"): {
        "summary": "A job's true view with every attempt",
        "security": _ADMIN, "parameters": [_JOB_ID],
        "responses": {"200": _json(_ref("AdminJobView"), "the job"), **_UNAUTHORIZED, "404": _err("no such job")}},
    ("POST", "/api/admin/jobs/{job_id}/retry"): {
        "summary": "Re-run a failed or canceled job",
        "security": _ADMIN, "parameters": [_JOB_ID],
        "responses": {"200": _json(_ref("AdminJobView"), "the job, queued again"), **_UNAUTHORIZED, **_CSRF,
                      "404": _err("no such job"),
                      "409": _err("not failed or canceled (invalid_state), or the target is busy (target_busy)")}},
    ("POST", "/api/admin/jobs/{job_id}/cancel"): {
        "summary": "Cancel an unfinished job",
        "security": _ADMIN, "parameters": [_JOB_ID],
        "responses": {"200": _json(_ref("AdminJobView"), "the job, canceled"), **_UNAUTHORIZED, **_CSRF,
                      "404": _err("no such job"), "409": _err("already finished (invalid_state)")}},
    ("POST", "/api/admin/kinds/{kind}/pause"): {
        "summary": "Pause a kind: submissions are still taken, nothing of it is claimed, running jobs finish",
        "security": _ADMIN, "parameters": [_KIND],
        "responses": {"200": _json(_ref("Kind"), "the kind, paused"), **_UNAUTHORIZED, **_CSRF,
                      "404": _err("no such kind (not_found)")}},
    ("POST", "/api/admin/kinds/{kind}/resume"): {
        "summary": "Resume a paused kind",
        "security": _ADMIN, "parameters": [_KIND],
        "responses": {"200": _json(_ref("Kind"), "the kind, claimed again"), **_UNAUTHORIZED, **_CSRF,
                      "404": _err("no such kind (not_found)")}},
    ("POST", "/api/admin/jobs/retry"): {
        "summary": "Re-run every failed or canceled job matching the filter (in bounded batches)",
        "security": _ADMIN,
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("BulkFilter")}}},
        "responses": {"200": _json(_ref("BulkCount"), "how many jobs were queued again"), **_UNAUTHORIZED, **_CSRF, **_BODY_ERRORS,
                      "422": _err("an empty filter (filter_required) or a bad one (invalid_request)")}},
    ("POST", "/api/admin/jobs/cancel"): {
        "summary": "Cancel every unfinished job matching the filter (in bounded batches)",
        "security": _ADMIN,
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("BulkFilter")}}},
        "responses": {"200": _json(_ref("BulkCount"), "how many jobs were canceled"), **_UNAUTHORIZED, **_CSRF, **_BODY_ERRORS,
                      "422": _err("an empty filter (filter_required) or a bad one (invalid_request)")}},
    ("GET", "/api/admin/schedules"): {
        "summary": "Periodic kinds with their last and next run",
        "security": _ADMIN,
        "responses": {"200": _json({"type": "object", "properties": {"schedules": {"type": "array", "items": {
            "type": "object", "properties": {
                "kind": {"type": "string"}, "schedule": {"type": "string", "nullable": True},
                "timezone": {"type": "string"}, "every_seconds": {"type": "number", "nullable": True},
                "since": _TIME, "last_slot": {**_TIME, "nullable": True},
                "last_job": {"type": "string", "format": "uuid", "nullable": True},
                "last_status": {"type": "string", "nullable": True}, "next_slot": _TIME}}}}},
            "the schedules"), **_UNAUTHORIZED}},
    ("GET", "/api/admin/stats"): {
        "summary": "Counts by kind and state, oldest due job age, throughput per minute",
        "security": _ADMIN,
        "responses": {"200": _json(_ref("Stats"), "the numbers"), **_UNAUTHORIZED}},
    ("GET", "/api/admin/workers"): {
        "summary": "Workers seen in the last hour; lost once silent for two leases",
        "security": _ADMIN,
        "responses": {"200": _json({"type": "object", "properties": {"workers": {"type": "array", "items": {
            "type": "object", "properties": {
                "id": {"type": "string"}, "host": {"type": "string"},
                "kinds": {"type": "array", "items": {"type": "string"}},
                "concurrency": {"type": "integer"}, "running": {"type": "integer"},
                "started_at": {"type": "string", "format": "date-time"},
                "last_seen": {"type": "string", "format": "date-time"}, "lost": {"type": "boolean"}}}}}},
            "the workers"), **_UNAUTHORIZED}},
    ("GET", "/api/admin/charts"): {
        "summary": "The last hour: depth by kind (sampled by the sweeper), wait p50/p95 by kind, failures by code",
        "security": _ADMIN,
        "responses": {"200": _json({"type": "object", "properties": {
            "now": {"type": "string", "format": "date-time"},
            "depth": {"type": "array", "items": {"type": "object"}},
            "wait": {"type": "array", "items": {"type": "object"}},
            "failures": {"type": "array", "items": {"type": "object"}}}}, "the charts' data"), **_UNAUTHORIZED}},
    ("GET", "/api/admin/events"): {
        "summary": "Server-sent events of every change, with true views (for the dashboard)",
        "description": "event: ready once subscribed; event: job with an admin view per change; "
                       "event: resync when changes may have been missed (reload the list).",
        "security": _ADMIN,
        "responses": {"200": _SSE, **_UNAUTHORIZED, **_TOO_MANY_STREAMS}},
    ("GET", "/api/admin/session"): {
        "summary": "Whether the request has admin rights (a session cookie or the bearer token)",
        "responses": {"200": _json({"type": "object", "required": ["signed_in"], "properties": {
            "signed_in": {"type": "boolean"}}}, "signed in or not; never 401")}},
    ("POST", "/api/admin/session"): {
        "summary": "Sign in: trade the admin token for an HttpOnly, SameSite=Strict session cookie",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["token"], "properties": {"token": {"type": "string"}}}}}},
        "responses": {"200": _json({"type": "object"}, "signed in; the cookie is set "
                                   "(over https __Host-jobfeed_admin, Secure; under a "
                                   "host's prefix __Secure-jobfeed_admin)"),
                      **_BODY_ERRORS,
                      "401": _err("wrong token, or no admin token configured"),
                      "422": _err("the body is not {\"token\": ...}")}},
    ("DELETE", "/api/admin/session"): {
        "summary": "Sign out: revoke the session (in every API process) and clear its cookie",
        "responses": {"204": {"description": "signed out"}, **_CSRF}},
    ("GET", "/api/live"): {
        "summary": "Whether this process's live feed is connected (event streams carry changes)",
        "description": "Answered from memory, never from the database: the pages ask it every few seconds.",
        "responses": {"200": _json({"type": "object", "required": ["live"],
                                    "properties": {"live": {"type": "boolean"}}},
                                   "live: false while the feed's connection to the database is down")}},
    ("GET", "/healthz"): {
        "summary": "Liveness", "responses": {"200": _json({"type": "object"}, "the process answers")}},
    ("GET", "/readyz"): {
        "summary": "Readiness: the database answers and its schema is current",
        "responses": {"200": _json({"type": "object"}, "ready"),
                      "503": _json({"type": "object"}, "database unreachable or migrations pending")}},
    ("GET", "/metrics"): {
        "summary": "Prometheus metrics",
        "description": "With JOBFEED_METRICS_TOKEN set, that token is needed as a bearer token; "
                       "without it, only loopback clients are answered.",
        "security": [{"metrics": []}, {}],
        "responses": {"200": {"description": "text exposition format",
                              "content": {"text/plain": {"schema": {"type": "string"}}}},
                      "401": _err("JOBFEED_METRICS_TOKEN is set and the request lacks it"),
                      "403": _err("no metrics token is set and the client is not on loopback")}},
    ("GET", "/openapi.json"): {
        "summary": "This document", "responses": {"200": _json({"type": "object"}, "OpenAPI 3")}},
    ("GET", "/"): {"summary": "Web UI: submit and watch jobs", "responses": {"200": _HTML}},
    ("GET", "/jobs/{job_id}"): {"summary": "Web UI: one job's page", "parameters": [_JOB_ID],
                                "responses": {"200": _HTML}},
    ("GET", "/admin"): {"summary": "Web UI: the admin dashboard", "responses": {"200": _HTML}},
    ("GET", "/static/{path}"): {
        "summary": "The web UI's files",
        "parameters": [{"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "a file"}, "404": _err("no such file")}},
}

_ERROR_OBJ = {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}
_PUBLIC = {
    "id": {"type": "string", "format": "uuid"}, "kind": {"type": "string"}, "target": {"type": "string"},
    "status": {"type": "string", "enum": list(STATUSES)},
    "progress": {"type": "object", "nullable": True, "properties": {
        "done": {"type": "number"}, "total": {"type": "number", "nullable": True},
        "message": {"type": "string", "nullable": True}}},
    "result": {"nullable": True}, "error": {**_ERROR_OBJ, "nullable": True},
    "created_at": _TIME, "updated_at": _TIME, "finished_at": {**_TIME, "nullable": True},
    "version": {"type": "integer"},
    "requesters": {"type": "integer", "description": "active requests (changes go out under the same version)"},
    "position": {"type": "integer", "nullable": True,
                 "description": "reads only (not in POST answers): for a due job never started, how many jobs "
                                "of its kind are claimed before it; null otherwise. On SSE refreshed at most "
                                "every 2 s under the same version"},
    "outputs": {"type": "array", "description": "files the handler saved, by name; download at "
                                                 "/api/jobs/{id}/outputs/{name}",
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "size": {"type": "integer"},
                                                           "content_type": {"type": "string"}}}},
    "scheduled_for": {**_TIME, "nullable": True,
                      "description": "the run_at/delay asked for, until it comes or the job first starts; null when due now"},
}

SCHEMAS = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": _ERROR_OBJ}},
    "Submission": {"type": "object", "required": ["kind", "target"], "additionalProperties": False,
                   "description": "an optional field but payload given as null is taken as absent",
                   "properties": {"kind": {"type": "string"},
                                  "target": {"type": "string", "minLength": 1,
                                             "description": f"1 to {MAX_TARGET_BYTES} bytes"},
                                  "payload": {"type": "object", "default": {}},
                                  "after": {"type": "array", "maxItems": 100,
                                            "items": {"type": "string", "format": "uuid"},
                                            "description": "ids of jobs this one waits for (true state "
                                                           "waiting); one failed or canceled fails it "
                                                           "with dependency_failed. Combines with run_at/"
                                                           "delay (due at the later of the two), priority, "
                                                           "concurrency_key and notify_url"},
                                  "await_signals": {"type": "array", "maxItems": 100,
                                                    "items": {"type": "string", "minLength": 1},
                                                    "description": "signal names the job waits for (POST "
                                                                   "/api/jobs/{id}/signals/{name})"},
                                  "signal_timeout": {"oneOf": [{"type": "string"}, {"type": "number"}],
                                                     "description": "e.g. 10m: fail with signal_timeout "
                                                                    "unless all signals arrived by then"},
                                  "force": {"type": "boolean", "default": False,
                                            "description": "skip the kind's reuse_for"},
                                  "notify_url": {"type": "string", "format": "uri", "maxLength": MAX_NOTIFY_URL,
                                                 "description": "POSTed the final view (Standard Webhooks); "
                                                                "its host must be in JOBFEED_WEBHOOK_HOSTS"},
                                  "run_at": {**_TIME, "description": "RFC 3339 with an offset; not with delay"},
                                  "delay": {"oneOf": [{"type": "string"}, {"type": "number"}], "example": "90s",
                                            "description": "a duration (500ms, 90s, 5m, 1h, 7d) or seconds; "
                                                           "not with run_at"},
                                  "priority": {"type": "integer", "description": "higher is claimed first; "
                                               "default: the kind's"},
                                  "concurrency_key": {"type": "string", "minLength": 1,
                                                      "description": "the kind's max_running_per_key applies "
                                                                     "per key"}}},
    "JobView": {"type": "object", "properties": _PUBLIC},
    "SubmitResult": {"type": "object", "properties": {
        **_PUBLIC, "deduplicated": {"type": "boolean"}, "reused": {"type": "boolean"},
        "request_id": {"type": "string", "format": "uuid", "description": "leave with DELETE /api/requests/{id}"}}},
    "SignalResult": {"type": "object", "properties": {**_PUBLIC, "first": {"type": "boolean"}}},
    "AdminJobView": {"type": "object", "properties": {
        **_PUBLIC,
        "state": {"type": "string", "enum": list(STATES)},
        "attempts": {"type": "integer"}, "max_attempts": {"type": "integer"}, "generation": {"type": "integer"},
        "run_after": _TIME, "lease_until": {**_TIME, "nullable": True},
        "worker_id": {"type": "string", "nullable": True}, "started_at": {**_TIME, "nullable": True},
        "last_error": {**_ERROR_OBJ, "nullable": True}, "payload": {"type": "object"},
        "priority": {"type": "integer"}, "concurrency_key": {"type": "string", "nullable": True},
        "parent_id": {"type": "string", "format": "uuid", "nullable": True,
                      "description": "the job whose handler submitted this one with ctx.submit"},
        "attempts_log": {"type": "array", "items": {"type": "object"}},
        "children": {"type": "array", "description": "GET of one job only: the first 100 jobs its handler "
                     "submitted with ctx.submit, by id", "items": {"type": "object", "properties": {
                         "id": {"type": "string", "format": "uuid"}, "kind": {"type": "string"},
                         "target": {"type": "string"}, "state": {"type": "string", "enum": list(STATES)}}}},
        "children_count": {"type": "integer", "description": "GET of one job only: how many there are"}}},
    "JobsPage": {"type": "object", "properties": {
        "jobs": {"type": "array", "items": _ref("AdminJobView")},
        "next_cursor": {"type": "string", "nullable": True}}},
    "Kind": {"type": "object", "properties": {
        "kind": {"type": "string"}, "description": {"type": "string"}, "max_attempts": {"type": "integer"},
        "lease_seconds": {"type": "number"}, "backoff_seconds": {"type": "array", "items": {"type": "number"}},
        "jitter": {"type": "number"}, "priority": {"type": "integer"}, "paused": {"type": "boolean"},
        "max_running": {"type": "integer", "nullable": True},
        "max_running_per_key": {"type": "integer", "nullable": True},
        "rate": {"type": "object", "nullable": True, "properties": {
            "count": {"type": "integer"}, "period_seconds": {"type": "number"}}},
        "dedupe": {"type": "string", "enum": list(DEDUPE)},
        "on_duplicate": {"type": "string", "enum": list(ON_DUPLICATE)},
        "on_abandon": {"type": "string", "enum": list(ON_ABANDON)},
        "reuse_for_seconds": {"type": "number", "nullable": True}}},
    "BulkFilter": {"type": "object", "additionalProperties": False, "minProperties": 1,
                   "description": "at least one field; all given must match",
                   "properties": {"state": {"type": "string", "enum": list(STATES)}, "kind": {"type": "string"},
                                  "error_code": {"type": "string", "description": "the job's last error code"},
                                  "ids": {"type": "array", "maxItems": 10000,
                                          "items": {"type": "string", "format": "uuid"}}}},
    "BulkCount": {"type": "object", "properties": {
        "count": {"type": "integer"},
        "skipped": {"type": "integer", "description": "present when some matching jobs were left as they were: "
                    "a retry whose target a newer unfinished job holds, or a job that changed meanwhile"}}},
    "Stats": {"type": "object", "properties": {
        "now": _TIME,
        "as_of": _TIME,
        "counts": {"type": "object", "additionalProperties": {"type": "object",
                                                              "additionalProperties": {"type": "integer"}}},
        "oldest_due_seconds": {"type": "number", "nullable": True},
        "throughput": {"type": "array", "items": {"type": "object"}}}},
}


# null in an optional field of a submission is as if absent (api/jobs.py _fields)
_submission = SCHEMAS["Submission"]
assert isinstance(_submission, dict)
for _field, _schema in _submission["properties"].items():
    if _field not in NOT_NULLABLE:
        _schema["nullable"] = True


# Every route that reads the database may find it away, and every route of
# jobfeed's own may be asked before its lifespan runs.
_UNAVAILABLE = _err("the database is not reachable (database_unavailable; Retry-After: 1), or jobfeed's "
                    "lifespan has not started in the host app (not_running)")
for (_method, _path), _operation in OPERATIONS.items():
    if _path.startswith("/api/"):
        _operation["responses"].setdefault("503", _UNAVAILABLE)
OPERATIONS[("GET", "/metrics")]["responses"]["503"] = _err(  # the database away, it answers without it
    "jobfeed's lifespan has not started in the host app (not_running)")


def document() -> dict:
    paths: dict[str, dict] = {}
    for (method, path), operation in OPERATIONS.items():
        paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {"title": "jobfeed", "version": importlib.metadata.version("jobfeed"),
                 "description": "A PostgreSQL job service: submit jobs, watch them live, run them with workers."},
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "metrics": {"type": "http", "scheme": "bearer", "description": "JOBFEED_METRICS_TOKEN"},
                "session": {"type": "apiKey", "in": "cookie", "name": "jobfeed_admin"}}},
    }


async def openapi_json(request: Request) -> Response:
    root = request.scope.get("root_path", "")
    # mounted under a prefix: the paths above are relative to it
    return JSONResponse({**document(), "servers": [{"url": root}]} if root else document())
