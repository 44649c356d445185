"""The mutation check's edits for the bugs the black-box passes of 2026-12-08
found where jobfeed meets what is around it: webhook receivers, a host app it
is mounted in, a database that crashes or turns connections away, a migrate
beside running processes, logs and the pages used by keyboard. One edit per
fix, each bringing its bug back (the passes before: mutation_edits_passes.py)."""

from __future__ import annotations

from mutation_edit import Edit

WEBHOOK_STATUS = "tests/test_webhooks.py::test_only_a_2xx_delivers_and_credentials_or_redirects_fail_for_good"
HOST_FORMS = "tests/test_webhooks.py::test_hosts_compare_in_one_form"
MOUNTED = "tests/test_embedding.py::test_a_host_mounts_jobfeed_under_a_prefix_with_its_pool"
KEYBOARD = "tests/test_browser_admin.py::test_the_dashboards_actions_keep_a_keyboard_users_place"

INTEGRATION_EDITS: list[Edit] = [
    # ------------------------------------------------------------ webhooks (stop 67)
    Edit("webhook-redirect-delivered", "worker/webhooks.py",
         "    if 200 <= status < 300:\n        return", "    if status < 400:\n        return",
         (WEBHOOK_STATUS,), "a receiver's 3xx delivered nothing: the delivery fails"),
    Edit("webhook-refusal-asked-again", "worker/webhooks.py",
         '    if 300 <= status < 400:\n        message += " (redirects are not followed)"',
         '    if status in (401, 403):\n        raise Transient(f"http_{status}", message, retry_after=0)',
         (WEBHOOK_STATUS,), "a receiver's 401/403 fails the delivery, not asked again for ever"),
    Edit("webhook-answer-read", "worker/webhooks.py",
         "                        pass\n", "                        await response.aread()\n",
         ("tests/test_webhooks.py::test_the_answer_body_is_never_read",),
         "a delivery never reads the answer's body"),
    Edit("webhook-no-deadline", "worker/webhooks.py",
         "        async with asyncio.timeout(DEADLINE):", "        async with asyncio.timeout(None):",
         ("tests/test_webhooks.py::test_an_attempt_ends_at_its_deadline_however_the_answer_trickles",),
         "a delivery attempt ends at its deadline however slowly the answer trickles"),
    Edit("webhook-retry-after-uncapped", "worker/webhooks.py",
         "retry_after=None if after is None else min(after, BACKOFF[-1])", "retry_after=after",
         ("tests/test_webhooks.py::test_a_retry_after_waits_at_most_the_longest_backoff",),
         "a receiver's Retry-After waits at most the longest backoff step"),
    Edit("host-trailing-dot-apart", "worker/hosts.py",
         '    host = text.removesuffix(".")', "    host = text",
         (HOST_FORMS,), "a host with a trailing dot is the same host"),
    Edit("host-numeric-ipv4-taken", "worker/hosts.py",
         "        socket.inet_aton(host)", '        socket.inet_aton("no address")',
         (HOST_FORMS, "tests/test_webhooks.py::test_webhook_settings"),
         "an IPv4 address written other than dotted decimal is no allowed host"),
    Edit("notify-url-port-zero", "worker/submission.py",
         " and port != 0\n", " and port != -1\n",
         (HOST_FORMS,), "a notify_url to port 0 is refused"),
    # ------------------------------------------------------------ embedding (stop 67)
    Edit("prefixed-cookie-host-only", "api/auth.py",
         "    return PREFIXED_SECURE_SESSION_COOKIE if request.scope.get(\"root_path\") else SECURE_SESSION_COOKIE",
         "    return SECURE_SESSION_COOKIE",
         (MOUNTED,), "over https under a prefix the session cookie is __Secure- (browsers drop a __Host- one)"),
    Edit("settings-in-code-unchecked", "worker/settings.py",
         "        for field, (key, check) in _CHECKED.items():", "        for field, (key, check) in ():",
         ("tests/test_settings.py::test_settings_given_in_code_are_refused_as_their_variables_are",),
         "a Settings made in code is checked as its variables would be"),
    Edit("host-pool-none-taken", "api/app.py",
         "    if source is None:\n        return None\n    given = source() if callable(source) else source\n",
         "    if source is None:\n        return None\n    given = source() if callable(source) else source\n"
         "    if given is None:\n        return None\n",
         ("tests/test_embedding.py::test_a_host_pool_that_cannot_serve_is_refused_saying_why",),
         "a pool= callable that answers None is refused, not replaced by a pool of jobfeed's own"),
    Edit("mount-counted-as-route", "api/metrics.py",
         "if route is not host_route else None", "if route is not None else None",
         (MOUNTED,), "a path of no jobfeed route under a host's mount is counted unmatched"),
    # ------------------------------------------------------------ faults and upgrades (stop 67)
    Edit("turned-away-is-500", "api/errors.py",
         "                 asyncpg.TooManyConnectionsError, asyncpg.InvalidAuthorizationSpecificationError,",
         "                 asyncpg.TooManyConnectionsError,",
         ("tests/test_api_database_gone.py::test_a_database_that_turns_connections_away_for_now_is_503",),
         "new connections turned away for now answer 503, not 500"),
    Edit("turned-away-reaches-the-handler", "worker/retrying.py",
         "    asyncpg.InvalidAuthorizationSpecificationError)", "    )",
         ("tests/test_runner_reports.py::test_a_flush_the_database_cannot_take_keeps_the_report_and_the_handler_"
          "runs_on",), "a report the database turns away is kept, not raised into the handler"),
    Edit("migrations-commit-one-by-one", "worker/migrate.py",
         "                if _ADDS_ENUM_VALUE.search(text):", "                if True:",
         ("tests/test_migrations.py::test_the_version_rises_with_the_functions_not_before",),
         "migrations, functions and version are one transaction: a failed migrate leaves nothing"),
    Edit("migration-deadlock-final", "worker/migrate.py",
         "            except asyncpg.DeadlockDetectedError:", "            except ZeroDivisionError:",
         ("tests/test_migrations.py::test_a_migration_undone_by_a_deadlock_is_made_again",),
         "a migration undone by a deadlock is made again"),
    # ------------------------------------------------------------ the pages, by keyboard (stop 67)
    Edit("kinds-focus-dropped", "static/js/admin-flow.js",
         "    if (focused !== undefined) {", "    if (false) {",
         (KEYBOARD,), "Pause/Resume keeps the keyboard's focus on its kind's new button"),
    Edit("bulk-question-escape-ignored", "static/js/admin-flow.js",
         '    if (e.key === "Escape") closeQuestion();', "    void e;",
         (KEYBOARD,), "Escape closes the bulk question, focus back on its opener"),
    Edit("detail-state-unannounced", "static/js/admin-detail.js",
         "  if (announced && announced.id === job.id && announced.state !== job.state) {",
         "  if (false) {",
         (KEYBOARD,), "the open job's state changes are announced"),
    Edit("progress-message-unbroken", "static/app.css",
         "p { overflow-wrap: anywhere; }", "p { }",
         ("tests/test_browser.py::test_a_long_unbroken_progress_message_stays_in_the_page",),
         "a long unbroken progress message stays in the page's width"),
    Edit("text-log-lines-forged", "worker/logs.py",
         "        if not message.isprintable():", "        if False:",
         ("tests/test_logs.py::test_a_text_record_is_one_line_whatever_its_message_holds",),
         "a text log record is one line: its message's control characters escaped"),
    Edit("migrate-failure-traceback", "worker/processes.py",
         "    except asyncpg.PostgresError as exc:  # a deadlock every time", "    except ZeroDivisionError as exc:  # a deadlock every time",
         ("tests/test_migrations.py::test_a_migrate_that_fails_in_the_database_says_so_in_one_line",),
         "a migrate that fails in the database says so in one line, exit 1"),
    Edit("up-prints-any-address", "worker/up.py",
         '    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)', "    host = host",
         ("tests/test_up.py::test_up_runs_everything_and_keeps_state_across_restarts",),
         "jobfeed up on 0.0.0.0 prints a URL a browser can open"),
    Edit("metrics-port-errors-plain", "worker/metrics.py",
         "                     exception_handlers={HTTPException: EXCEPTION_HANDLERS[HTTPException]})",
         "                     exception_handlers={})",
         ("tests/test_metrics.py::test_the_metrics_port_answers_other_paths_as_the_api_does",),
         "the metrics port answers other paths with the contract's JSON error"),
]
