"""What the handlers share, owned by the app's lifespan."""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

import asyncpg
from starlette.requests import Request

from jobfeed.worker.queue import Queue
from jobfeed.worker.settings import Settings
from jobfeed.worker.submission import InvalidSubmission, check_requester

from .batching import SubmitBatcher
from .errors import ApiError
from .feed import Feed
from .metrics import Metrics

log = logging.getLogger("jobfeed.api")

# The host's hook naming who sent a request (its user id, say), or None for
# nobody in particular. Called per request on the event loop: keep it cheap.
Identify = Callable[[Request], "str | None"]


def body_limit(max_payload: int) -> int:
    """The largest JSON body taken. The payload limit is exact (checked in SQL
    on the stored form). The body may spell the payload six times longer (a
    byte as \\u0001; "é", two bytes, as \\u00e9, as json.dumps writes it by
    default) and holds kind, target and the JSON around them: no payload that
    fits is refused for its body."""
    return 6 * max_payload + 16 * 1024


@dataclasses.dataclass
class Services:
    settings: Settings
    metrics: Metrics
    identify: Identify | None = None
    # Made by the app's lifespan, before any request is served.
    pool: asyncpg.Pool = dataclasses.field(init=False)
    queue: Queue = dataclasses.field(init=False)
    feed: Feed = dataclasses.field(init=False)
    batcher: SubmitBatcher = dataclasses.field(init=False)
    running: bool = dataclasses.field(init=False, default=False)  # between the lifespan's start and end
    _said_not_running: bool = dataclasses.field(init=False, default=False)

    @property
    def body_limit(self) -> int:
        return body_limit(self.settings.max_payload)

    def requester(self, request: Request) -> str | None:
        """Who sent this request: the host's identify hook, else the header a
        trusted proxy sets (JOBFEED_REQUESTER_HEADER); None (or "") for nobody
        known. 422 invalid_requester for one too long to store; a hook that
        answers no string is the host's bug (a TypeError, a 500)."""
        if self.identify is not None:
            who = self.identify(request)
            if who is not None and not isinstance(who, str):
                raise TypeError(f"identify(request) must return a str or None, not {type(who).__name__}")
        elif self.settings.requester_header is not None:
            given = request.headers.getlist(self.settings.requester_header)
            if len(given) > 1:  # a proxy that added its header to the client's: whose is it?
                raise InvalidSubmission(422, "invalid_requester",
                                        f"{self.settings.requester_header} came more than once: the proxy "
                                        "must replace the client's header, not add one")
            who = given[0] if given else None
        else:
            return None
        return check_requester(who)  # InvalidSubmission: a 422 (api/errors.py)


NOT_RUNNING = ("jobfeed's lifespan is not running: a host app that mounts jobfeed.api.create_app() enters "
               "jobfeed.api.lifespan(app) from its own lifespan (README, Embedding)")


def services(request: Request) -> Services:
    svc = request.app.state.services
    if not svc.running:
        if not svc._said_not_running:  # once: the host's log needs the reason, not a flood
            svc._said_not_running = True
            log.error(NOT_RUNNING)
        raise ApiError(503, "not_running", NOT_RUNNING)
    return svc
