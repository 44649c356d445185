"""Settings as values: what Settings.from_env reads from the environment and
what a Settings made in code (create_app(settings=)) may hold, refused by the
same rule naming the same variable. No database: the commands' refusals at
start are tests/test_cli.py's."""

from __future__ import annotations

import pytest

from jobfeed.worker.settings import SettingError, Settings


def test_an_empty_database_url_is_not_the_embedded_server():
    with pytest.raises(SettingError, match="^DATABASE_URL is set but empty"):
        Settings.from_env({"DATABASE_URL": ""})
    assert Settings.from_env({}).database_url is None  # unset: the embedded server


def test_a_flag_replaces_its_setting_which_is_then_not_read():
    env = {"JOBFEED_PORT": "abc", "JOBFEED_HOST": "not..a..host"}
    settings = Settings.from_env(env, host="127.0.0.1", port=8777)
    assert (settings.host, settings.port) == ("127.0.0.1", 8777)
    with pytest.raises(SettingError, match="JOBFEED_PORT"):
        Settings.from_env(env, host="127.0.0.1")
    with pytest.raises(SettingError, match="JOBFEED_HOST"):
        Settings.from_env(env, port=8777)
    assert Settings.from_env({"JOBFEED_PORT": "8778"}, port=8777).port == 8777


@pytest.mark.parametrize("field, value, key", [
    ("job_access", "requester", "JOBFEED_JOB_ACCESS"),  # a typo that would leave jobs open to anyone
    ("max_active_per_requester", 0, "JOBFEED_MAX_ACTIVE_PER_REQUESTER"), ("max_payload", -1, "JOBFEED_MAX_PAYLOAD"),
    ("submit_batch", 0, "JOBFEED_SUBMIT_BATCH"), ("leave_grace", -5, "JOBFEED_LEAVE_GRACE"),
    ("sse_retry", -1, "JOBFEED_SSE_RETRY"), ("session_lifetime", 0, "JOBFEED_SESSION_LIFETIME"),
    ("max_header_bytes", 10, "JOBFEED_MAX_HEADER_BYTES"), ("log_format", "xml", "JOBFEED_LOG_FORMAT"),
    ("webhook_secret", "notwhsec", "JOBFEED_WEBHOOK_SECRET"), ("requester_header", "bad header",
                                                                "JOBFEED_REQUESTER_HEADER"),
    ("cors_origins", ("http://x/path",), "JOBFEED_CORS_ORIGINS"), ("webhook_hosts", ("http://x:80",),
                                                                   "JOBFEED_WEBHOOK_HOSTS"),
    ("lease", 0.01, "JOBFEED_LEASE"), ("lease", "5m", "JOBFEED_LEASE"), ("max_attempts", True, "JOBFEED_MAX_ATTEMPTS"),
    ("backoff", (), "JOBFEED_BACKOFF"), ("port", 70000, "JOBFEED_PORT"), ("max_upload", 0, "JOBFEED_MAX_UPLOAD"),
])
def test_settings_given_in_code_are_refused_as_their_variables_are(field, value, key):
    """Settings(...) (create_app(settings=) in a host app) checks what the
    environment's variables would: the same rule, the same name in the message."""
    with pytest.raises(SettingError, match=f"^{key}"):
        Settings(**{field: value})


def test_names_given_in_code_are_kept_in_the_form_they_are_compared_in():
    settings = Settings(job_access="Requesters", webhook_hosts=("Hooks.Example.",), requester_header="X-User",
                        lease=0.15, port=0)
    assert (settings.job_access, settings.webhook_hosts, settings.requester_header) == \
        ("requesters", ("hooks.example",), "x-user")
    assert (settings.lease, settings.port) == (0.15, 0)  # numbers as given; port 0: any free one (--port 0)


def test_durations_at_their_least_are_taken():
    settings = Settings.from_env({"JOBFEED_LEASE": "150ms", "JOBFEED_BACKOFF": "1ms,2ms", "JOBFEED_RETENTION": "1ms"})
    assert (settings.lease, settings.backoff, settings.retention) == (0.15, (0.001, 0.002), 0.001)
    with pytest.raises(SettingError, match="JOBFEED_LEASE: '0.1s' is shorter than the least allowed, 150ms"):
        Settings.from_env({"JOBFEED_LEASE": "0.1s"})


@pytest.mark.parametrize("key, value", [
    ("JOBFEED_RETENTION", "\uff17d"), ("JOBFEED_LEASE", "\u0665s"), ("JOBFEED_MAX_ATTEMPTS", "\uff15"),
    ("JOBFEED_MAX_ATTEMPTS", "5_0"), ("JOBFEED_MAX_ATTEMPTS", "+5"), ("JOBFEED_PORT", "\uff18\uff10"),
    ("JOBFEED_MAX_PAYLOAD", "\u0666\u0664KiB")])
def test_numbers_in_settings_are_ascii_digits(key, value):
    """Fullwidth or Arabic-Indic digits, int()'s "5_0" and "+5": each a typo
    more likely than a number meant, refused naming the setting."""
    with pytest.raises(SettingError, match=f"^{key}: "):
        Settings.from_env({key: value})
