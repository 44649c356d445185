"""Settings, read once from the environment (flags override): one object for
every jobfeed process (API, worker, sweeper, CLI) and for an app that embeds
jobfeed's API. A bad value stops the process at start with a message naming the
setting."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from .hosts import canonical_host
from .limits import INT_MAX, MAX_PAYLOAD_BYTES

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)\s*$")  # ASCII digits: \d takes '٥' too


class SettingError(ValueError):
    """A setting has a value jobfeed cannot use."""


# The longest duration anything takes (seconds, about 31 years): further than
# any schedule, lease or retention needs, and well inside what a date can hold.
MAX_DURATION = 10**9
# The shortest duration kept in the database (a kind's options and rate period,
# JOBFEED_BACKOFF, JOBFEED_RETENTION): an interval holds whole microseconds, so
# a shorter one could round to none; nothing a worker times is shorter.
MIN_DURATION = 0.001
# The shortest lease: the heartbeat renews a lease every third of it, but no
# more often than every MIN_LEASE / 3 (worker/run_context.py); a shorter lease
# would lapse between renewals and its job be taken from a healthy worker.
MIN_LEASE = 0.15


def too_short(name: str, text: object, least: float) -> SettingError:
    return SettingError(f"{name}: {str(text)[:64]!r} is shorter than the least allowed, {least * 1000:g}ms")


def parse_duration(text: str, name: str = "duration", *, zero: bool = False, least: float = 0.0,
                   most: float | None = MAX_DURATION) -> float:
    """'500ms', '30s', '5m', '1h', '7d' -> seconds; zero only when allowed,
    otherwise at least `least`; at most `most` (None: no bound, for a caller
    that clamps)."""
    match = _DURATION.match(str(text))
    if not match:
        raise SettingError(f"{name}: {str(text)[:64]!r} is not a duration (write e.g. 500ms, 30s, 5m, 1h, 7d)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0 and not zero:
        raise SettingError(f"{name}: {text!r} must be longer than zero")
    if 0 < seconds < least:
        raise too_short(name, text, least)
    if most is not None and seconds > most:
        raise SettingError(f"{name}: {str(text)[:64]!r} is longer than the most allowed, {most:,.0f}s")
    return seconds


def parse_list(text: str, name: str, example: str) -> list[str]:
    """A comma-separated setting's parts, stripped. An empty part is refused, not
    dropped: "1s,,2s" more likely lost a value than meant two."""
    parts = [p.strip() for p in str(text).split(",")]
    if "" in parts:
        raise SettingError(f"{name}: {str(text)[:64]!r} has an empty part (write e.g. {example})")
    return parts


def parse_durations(text: str, name: str) -> tuple[float, ...]:
    """Delays kept in the database (a backoff): each at least MIN_DURATION."""
    return tuple(parse_duration(p, name, least=MIN_DURATION) for p in parse_list(text, name, "1m,5m,15m,60m"))


def parse_folder(text: str, name: str) -> Path:
    """A folder, made when first needed: refused when it, or the nearest part of
    its path that is there, is not a folder (a file, a dangling link)."""
    path = Path(text).expanduser()
    for part in (path, *path.parents):
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                raise SettingError(f"{name}: {str(path)[:200]} cannot be a folder: {str(part)[:200]} is not one")
            break
    return path


def parse_canonical_host(text: str, name: str) -> str:
    """A host in the form the webhook allow-list compares (worker/hosts.py)."""
    host = canonical_host(str(text).strip())
    if host is None:
        raise SettingError(f"{name}: {str(text).strip()[:64]!r} is not an IP address (IPv4 dotted, IPv6 without "
                           "brackets) or a host name")
    return host


def parse_host(text: str, name: str) -> str:
    """An IP address or a host name, as written (a bind address)."""
    parse_canonical_host(text, name)
    return str(text).strip()


def check_webhook_secret(text: str) -> str:
    """JOBFEED_WEBHOOK_SECRET: the Standard Webhooks form whsec_<base64>, at least 16 bytes."""
    body = text.strip().removeprefix("whsec_")
    try:
        key = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not text.strip().startswith("whsec_") or len(key) < 16:
        raise SettingError("JOBFEED_WEBHOOK_SECRET: write it as whsec_ and at least 16 random bytes in base64")
    return text.strip()


def digits(text: str | None, max_len: int = 18) -> int | None:
    """The whole number `text` spells in ASCII digits (at most max_len), else
    None. int() also reads '７', '٣', '+5' and '5_000', and str.isdigit() takes
    '²', on which int() raises; int() of a 5,000-digit string is slow."""
    if not text or len(text) > max_len or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def parse_positive_int(text: str, name: str) -> int:
    value = digits(str(text).strip())
    if value is None:
        raise SettingError(f"{name}: {text!r} is not a whole number")
    if not 1 <= value <= INT_MAX:
        raise SettingError(f"{name}: {text!r} must be from 1 to {INT_MAX}")
    return value


_SIZE_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "kb": 1000, "mb": 1000 ** 2,
               "gb": 1000 ** 3}
_SIZE = re.compile(r"^\s*([0-9]{1,15})\s*([a-zA-Z]*)\s*$")

# The least JOBFEED_MAX_HEADER_BYTES and JOBFEED_REQUEST_TIMEOUT: below them
# every request is refused (a unit left off: "1" for 1KiB, "1ms" for 1s).
MIN_HEADER_BYTES = 1024
MIN_REQUEST_TIMEOUT = 0.1

# Shorter admin tokens are refused: guessable, and "" once signed anyone in.
MIN_ADMIN_TOKEN = 16


def parse_size(text: str, name: str = "size") -> int:
    """'65536', '64KiB', '100MiB' -> bytes."""
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise SettingError(f"{name}: {text!r} is not a size (write bytes, or e.g. 64KiB, 100MiB)")
    value = int(match.group(1)) * _SIZE_UNITS[unit]
    if value < 1:
        raise SettingError(f"{name}: {text!r} must be at least one byte")
    return value


def parse_header_bytes(text: str, name: str = "JOBFEED_MAX_HEADER_BYTES") -> int:
    value = parse_size(text, name)
    if value < MIN_HEADER_BYTES:
        raise SettingError(f"{name}: {text!r} is under {MIN_HEADER_BYTES} bytes, which no browser's request fits "
                           "in (write e.g. 64KiB)")
    return value


def parse_header_name(text: str, name: str) -> str:
    header = str(text).strip().lower()
    if not re.fullmatch(r"[a-z0-9!#$%&'*+.^_`|~-]+", header):
        raise SettingError(f"{name}: {header!r} is not a header name")
    return header


def parse_payload_limit(text: str, name: str = "JOBFEED_MAX_PAYLOAD") -> int:
    """A size like the others ('65536', '64KiB'); the database takes it as an int."""
    value = parse_size(text, name)
    if value > INT_MAX:
        raise SettingError(f"{name}: {text!r} is over 2 GiB")
    return value


def max_payload_from_env(env: Mapping[str, str] | None = None) -> int:
    """JOBFEED_MAX_PAYLOAD alone: what a Queue given no settings needs on every
    submission, without reading (and checking) every other setting."""
    text = (os.environ if env is None else env).get("JOBFEED_MAX_PAYLOAD")
    return _payload_limit(text) if text else MAX_PAYLOAD_BYTES


@functools.lru_cache(maxsize=8)
def _payload_limit(text: str) -> int:
    return parse_payload_limit(text)


def check_admin_token(token: str | None, name: str = "JOBFEED_ADMIN_TOKEN") -> None:
    check_token(token, name)
    if token is not None and len(token) < MIN_ADMIN_TOKEN:
        raise SettingError(f"{name}: the admin token must be at least {MIN_ADMIN_TOKEN} characters long")


def check_token(token: str | None, name: str) -> None:
    """A token travels in an Authorization header, whose value loses the spaces
    around it and cannot carry control characters: a token with either could
    never be presented, so it is refused at start."""
    if token is not None and not token:
        raise SettingError(f"{name}: the token is empty")
    if token is not None and any(not "!" <= c <= "~" for c in token):
        raise SettingError(f"{name}: a token is printable ASCII without spaces")


def parse_port(text: str, name: str, *, free: bool = False) -> int:
    """A port number; free=True also takes 0, "any free port"."""
    port = digits(str(text).strip(), 5)
    if port is None:
        raise SettingError(f"{name}: {text!r} is not a port number")
    if not (0 if free else 1) <= port <= 65535:
        raise SettingError(f"{name}: {port} is not a port number")
    return port


# The settings a command-line flag replaces (Settings field: variable): given
# the flag, the variable is not read, by this process nor by those it starts.
FLAG_SETTINGS = {"host": "JOBFEED_HOST", "port": "JOBFEED_PORT"}

LOG_FORMATS = ("text", "json")
JOB_ACCESS = ("link", "requesters")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def parse_choice(text: str, name: str, choices: tuple[str, ...]) -> str:
    value = str(text).strip().lower()
    if value not in choices:
        raise SettingError(f"{name}: {text!r} is not one of {', '.join(choices)}")
    return value


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "jobfeed"


def parse_origins(text: str, name: str) -> tuple[str, ...]:
    """Comma-separated origins as a browser sends them (scheme://host[:port],
    no path, no trailing slash: anything else could never match one), or *."""
    origins = tuple(o.strip() for o in text.split(",") if o.strip())
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://[^\s/?#@]+", origin):
            raise SettingError(f"{name}: {origin!r} is not an origin (like https://app.example.com or "
                               "http://localhost:3000, without a path)")
    return origins


def _seconds(value) -> str:
    return f"{float(value):.6f}s"


def _typed(parse: Callable[[str], Any], render: Callable[[Any], str] = str) -> Callable[[Any], Any]:
    """A check of a value given in code (Settings(...), create_app(settings=)):
    the variable's own parse, of the value written as the variable would be;
    the value itself kept (numbers), or its parsed form (names: lower case)."""
    def check(value):
        parsed = parse(render(value))
        return parsed if isinstance(value, (str, tuple)) else value
    return check


# Field: (its variable, its check). Tokens, URLs and folders are checked apart.
_CHECKED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "host": ("JOBFEED_HOST", _typed(lambda t: parse_host(t, "JOBFEED_HOST"))),
    "port": ("JOBFEED_PORT", _typed(lambda t: parse_port(t, "JOBFEED_PORT", free=True))),  # --port 0: any free
    "backoff": ("JOBFEED_BACKOFF", _typed(lambda t: parse_durations(t, "JOBFEED_BACKOFF"),
                                          lambda v: ",".join(_seconds(x) for x in v))),
    "lease": ("JOBFEED_LEASE", _typed(lambda t: parse_duration(t, "JOBFEED_LEASE", least=MIN_LEASE), _seconds)),
    "max_attempts": ("JOBFEED_MAX_ATTEMPTS", _typed(lambda t: parse_positive_int(t, "JOBFEED_MAX_ATTEMPTS"))),
    "retention": ("JOBFEED_RETENTION",
                  _typed(lambda t: parse_duration(t, "JOBFEED_RETENTION", least=MIN_DURATION), _seconds)),
    "max_payload": ("JOBFEED_MAX_PAYLOAD", _typed(parse_payload_limit)),
    "cors_origins": ("JOBFEED_CORS_ORIGINS", _typed(lambda t: parse_origins(t, "JOBFEED_CORS_ORIGINS"), ",".join)),
    **{field: (key, _typed(functools.partial(parse_duration, name=key), _seconds)) for field, key in (
        ("sse_ping", "JOBFEED_SSE_PING"), ("sse_retry", "JOBFEED_SSE_RETRY"), ("feed_batch", "JOBFEED_FEED_BATCH"),
        ("listener_health", "JOBFEED_LISTENER_HEALTH"), ("session_lifetime", "JOBFEED_SESSION_LIFETIME"))},
    **{field: (key, _typed(functools.partial(parse_positive_int, name=key))) for field, key in (
        ("submit_batch", "JOBFEED_SUBMIT_BATCH"), ("max_active_per_requester", "JOBFEED_MAX_ACTIVE_PER_REQUESTER"),
        ("max_streams_per_client", "JOBFEED_MAX_STREAMS_PER_CLIENT"), ("max_streams", "JOBFEED_MAX_STREAMS"))},
    "requester_header": ("JOBFEED_REQUESTER_HEADER",
                         _typed(lambda t: parse_header_name(t, "JOBFEED_REQUESTER_HEADER"))),
    "job_access": ("JOBFEED_JOB_ACCESS", _typed(lambda t: parse_choice(t, "JOBFEED_JOB_ACCESS", JOB_ACCESS))),
    "leave_grace": ("JOBFEED_LEAVE_GRACE",
                    _typed(lambda t: parse_duration(t, "JOBFEED_LEAVE_GRACE", zero=True), _seconds)),
    "webhook_hosts": ("JOBFEED_WEBHOOK_HOSTS", lambda v: tuple(parse_canonical_host(h, "JOBFEED_WEBHOOK_HOSTS")
                                                               for h in v)),
    "webhook_secret": ("JOBFEED_WEBHOOK_SECRET", check_webhook_secret),
    "max_header_bytes": ("JOBFEED_MAX_HEADER_BYTES", _typed(parse_header_bytes)),
    "request_timeout": ("JOBFEED_REQUEST_TIMEOUT", _typed(
        lambda t: parse_duration(t, "JOBFEED_REQUEST_TIMEOUT", least=MIN_REQUEST_TIMEOUT), _seconds)),
    "metrics_port": ("JOBFEED_METRICS_PORT", _typed(lambda t: parse_port(t, "JOBFEED_METRICS_PORT"))),
    "log_format": ("JOBFEED_LOG_FORMAT", _typed(lambda t: parse_choice(t, "JOBFEED_LOG_FORMAT", LOG_FORMATS))),
    "max_upload": ("JOBFEED_MAX_UPLOAD", _typed(lambda t: parse_size(t, "JOBFEED_MAX_UPLOAD"))),
}


# Settings that guard something: set but empty is refused, not taken as unset.
SECRETS = ("JOBFEED_ADMIN_TOKEN", "JOBFEED_API_TOKEN", "JOBFEED_METRICS_TOKEN", "JOBFEED_WEBHOOK_SECRET")


@dataclasses.dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    # the server itself, when DATABASE_URL is a pooler's in transaction mode
    # (PgBouncer): LISTEN, advisory locks and migrations connect here (worker/db.py)
    direct_url: str | None = None
    data_dir: Path = dataclasses.field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = 8000
    admin_token: str | None = None
    api_token: str | None = None
    backoff: tuple[float, ...] = (60, 300, 900, 3600)
    lease: float = 300
    max_attempts: int = 5
    retention: float = 7 * 86400
    tasks: tuple[str, ...] = ()
    max_payload: int = MAX_PAYLOAD_BYTES
    cors_origins: tuple[str, ...] = ()
    # the API process's own (streams, the live feed, sessions, group commit)
    sse_ping: float = 15.0          # seconds between ': ping' comments on open streams
    sse_retry: float = 2.0          # what EventSource waits before reconnecting (sent as retry:)
    feed_batch: float = 0.01        # at most one re-read of changed jobs this often (after a quiet spell: at once)
    listener_health: float = 10.0   # how often an idle LISTEN connection is checked
    session_lifetime: float = 12 * 3600  # the admin session cookie's lifetime
    submit_batch: int = 256         # most submissions written in one statement (1: each alone)
    # requests (who waits for a job)
    requester_header: str | None = None         # a header a trusted proxy sets to the caller's identity
    max_active_per_requester: int | None = None  # more active requests of one identity: 429
    job_access: str = "link"                     # "link" (anyone with the id) or "requesters"
    # the longest a deferred leave waits (POST .../leave?grace=, a closing job
    # page's beacon) for its page to come back: a reload or Back is quicker
    leave_grace: float = 20.0
    webhook_hosts: tuple[str, ...] = ()          # hosts a notify_url may name (any port); none: refused
    webhook_secret: str | None = None            # whsec_<base64>: signs deliveries
    # Caps against a client that holds too much (README, "Security").
    max_streams_per_client: int = 100
    max_streams: int = 20000
    max_header_bytes: int = 64 * 1024
    request_timeout: float = 30.0   # to finish a request's headers and body
    metrics_token: str | None = None
    metrics_port: int | None = None  # workers and sweepers serve /metrics here when set
    log_format: str = "text"          # or "json": one object per line (worker/logs.py)
    max_upload: int = 100 * 1024 * 1024  # a multipart POST /api/jobs, files and all (JOBFEED_MAX_UPLOAD)

    def __post_init__(self):
        if self.direct_url and not self.database_url:
            raise SettingError("JOBFEED_DIRECT_URL: set it beside DATABASE_URL (the pooler's address); "
                               "alone, connect with DATABASE_URL")
        check_admin_token(self.admin_token)
        check_token(self.api_token, "JOBFEED_API_TOKEN")
        check_token(self.metrics_token, "JOBFEED_METRICS_TOKEN")
        for field, (key, check) in _CHECKED.items():  # refused as its variable would be
            value = getattr(self, field)
            if value is None:
                continue
            try:
                fixed = check(value)
            except SettingError:
                raise
            except (TypeError, ValueError, AttributeError):  # not even of the field's type
                raise SettingError(f"{key} ({field}): {value!r} is not a value it takes") from None
            if fixed != value:
                object.__setattr__(self, field, fixed)  # a name in the form the process compares

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> "Settings":
        env = dict(os.environ if env is None else env)
        for field, key in FLAG_SETTINGS.items():
            if overrides.get(field) is not None:
                env.pop(key, None)
        values: dict = {}
        if env.get("DATABASE_URL") == "":
            # a deploy template whose URL came out empty: taken as unset, the
            # command would start an embedded server of its own, a database
            # no other process sees
            raise SettingError("DATABASE_URL is set but empty: give it a value, or unset it for the embedded server")
        if env.get("DATABASE_URL"):
            values["database_url"] = env["DATABASE_URL"]
        if env.get("JOBFEED_DIRECT_URL"):
            values["direct_url"] = env["JOBFEED_DIRECT_URL"]
        if env.get("JOBFEED_DATA_DIR"):
            values["data_dir"] = parse_folder(env["JOBFEED_DATA_DIR"], "JOBFEED_DATA_DIR")
        if env.get("JOBFEED_HOST"):
            values["host"] = parse_host(env["JOBFEED_HOST"], "JOBFEED_HOST")
        if env.get("JOBFEED_PORT"):
            values["port"] = parse_port(env["JOBFEED_PORT"], "JOBFEED_PORT")
        for key in SECRETS:
            if env.get(key) == "":
                # a deploy template whose secret came out empty: taken as unset, it
                # would leave submissions (or metrics) open, or webhooks unsigned
                raise SettingError(f"{key} is set but empty: give it a value, or unset it")
        for key, field in (("JOBFEED_ADMIN_TOKEN", "admin_token"), ("JOBFEED_API_TOKEN", "api_token")):
            if env.get(key):
                values[field] = env[key]
        if env.get("JOBFEED_BACKOFF"):
            values["backoff"] = parse_durations(env["JOBFEED_BACKOFF"], "JOBFEED_BACKOFF")
        if env.get("JOBFEED_LEASE"):
            values["lease"] = parse_duration(env["JOBFEED_LEASE"], "JOBFEED_LEASE", least=MIN_LEASE)
        if env.get("JOBFEED_MAX_ATTEMPTS"):
            values["max_attempts"] = parse_positive_int(env["JOBFEED_MAX_ATTEMPTS"], "JOBFEED_MAX_ATTEMPTS")
        if env.get("JOBFEED_RETENTION"):
            values["retention"] = parse_duration(env["JOBFEED_RETENTION"], "JOBFEED_RETENTION",
                                                 least=MIN_DURATION)
        if env.get("JOBFEED_TASKS"):
            values["tasks"] = tuple(m.strip() for m in env["JOBFEED_TASKS"].split(",") if m.strip())
        values["max_payload"] = max_payload_from_env(env)
        if env.get("JOBFEED_CORS_ORIGINS"):
            values["cors_origins"] = parse_origins(env["JOBFEED_CORS_ORIGINS"], "JOBFEED_CORS_ORIGINS")
        for key, field in (("JOBFEED_SSE_PING", "sse_ping"), ("JOBFEED_SSE_RETRY", "sse_retry"),
                           ("JOBFEED_FEED_BATCH", "feed_batch"),
                           ("JOBFEED_LISTENER_HEALTH", "listener_health"),
                           ("JOBFEED_SESSION_LIFETIME", "session_lifetime")):
            if env.get(key):
                values[field] = parse_duration(env[key], key)
        if env.get("JOBFEED_SUBMIT_BATCH"):
            values["submit_batch"] = parse_positive_int(env["JOBFEED_SUBMIT_BATCH"], "JOBFEED_SUBMIT_BATCH")
        if env.get("JOBFEED_REQUESTER_HEADER"):
            values["requester_header"] = parse_header_name(env["JOBFEED_REQUESTER_HEADER"], "JOBFEED_REQUESTER_HEADER")
        if env.get("JOBFEED_MAX_ACTIVE_PER_REQUESTER"):
            values["max_active_per_requester"] = parse_positive_int(
                env["JOBFEED_MAX_ACTIVE_PER_REQUESTER"], "JOBFEED_MAX_ACTIVE_PER_REQUESTER")
        if env.get("JOBFEED_JOB_ACCESS"):
            values["job_access"] = parse_choice(env["JOBFEED_JOB_ACCESS"], "JOBFEED_JOB_ACCESS", JOB_ACCESS)
        if env.get("JOBFEED_LEAVE_GRACE"):
            values["leave_grace"] = parse_duration(env["JOBFEED_LEAVE_GRACE"], "JOBFEED_LEAVE_GRACE", zero=True)
        for key, field in (("JOBFEED_MAX_STREAMS_PER_CLIENT", "max_streams_per_client"),
                           ("JOBFEED_MAX_STREAMS", "max_streams")):
            if env.get(key):
                values[field] = parse_positive_int(env[key], key)
        if env.get("JOBFEED_MAX_HEADER_BYTES"):
            values["max_header_bytes"] = parse_header_bytes(env["JOBFEED_MAX_HEADER_BYTES"])
        if env.get("JOBFEED_MAX_UPLOAD"):
            values["max_upload"] = parse_size(env["JOBFEED_MAX_UPLOAD"], "JOBFEED_MAX_UPLOAD")
        if env.get("JOBFEED_REQUEST_TIMEOUT"):
            values["request_timeout"] = parse_duration(env["JOBFEED_REQUEST_TIMEOUT"], "JOBFEED_REQUEST_TIMEOUT",
                                                       least=MIN_REQUEST_TIMEOUT)
        if env.get("JOBFEED_METRICS_TOKEN"):
            values["metrics_token"] = env["JOBFEED_METRICS_TOKEN"]
        if env.get("JOBFEED_WEBHOOK_HOSTS"):
            hosts = parse_list(env["JOBFEED_WEBHOOK_HOSTS"], "JOBFEED_WEBHOOK_HOSTS", "hooks.example.com,10.0.0.5")
            values["webhook_hosts"] = tuple(parse_canonical_host(h, "JOBFEED_WEBHOOK_HOSTS") for h in hosts)
        if env.get("JOBFEED_WEBHOOK_SECRET"):
            values["webhook_secret"] = check_webhook_secret(env["JOBFEED_WEBHOOK_SECRET"])
        if env.get("JOBFEED_METRICS_PORT"):
            values["metrics_port"] = parse_port(env["JOBFEED_METRICS_PORT"], "JOBFEED_METRICS_PORT")
        if env.get("JOBFEED_LOG_FORMAT"):
            values["log_format"] = parse_choice(env["JOBFEED_LOG_FORMAT"], "JOBFEED_LOG_FORMAT", LOG_FORMATS)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
