"""Settings only the API process uses (stream timing, the live feed's batching),
read from the environment like worker.settings.Settings."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from jobfeed.worker.settings import parse_duration, parse_positive_int


@dataclasses.dataclass(frozen=True)
class ApiConfig:
    sse_ping: float = 15.0          # seconds between ': ping' comments on open streams
    sse_retry: float = 2.0          # what EventSource waits before reconnecting (sent as retry:)
    feed_batch: float = 0.01        # collect notifications this long, then re-read them in one query
    listener_health: float = 10.0   # how often an idle LISTEN connection is checked
    session_lifetime: float = 12 * 3600  # the admin session cookie's lifetime
    submit_batch: int = 256         # most submissions written in one statement (1: each alone)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> "ApiConfig":
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for key, field in (("JOBFEED_SSE_PING", "sse_ping"), ("JOBFEED_SSE_RETRY", "sse_retry"),
                           ("JOBFEED_FEED_BATCH", "feed_batch"),
                           ("JOBFEED_LISTENER_HEALTH", "listener_health"),
                           ("JOBFEED_SESSION_LIFETIME", "session_lifetime")):
            if env.get(key):
                values[field] = parse_duration(env[key], key)
        if env.get("JOBFEED_SUBMIT_BATCH"):
            values["submit_batch"] = parse_positive_int(env["JOBFEED_SUBMIT_BATCH"], "JOBFEED_SUBMIT_BATCH")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
