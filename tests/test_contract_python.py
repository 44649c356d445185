"""CONTRACT (Worker, Packaging): the public Python names as the contract writes
them, without a database."""

from __future__ import annotations

import jobfeed
from jobfeed import LeaseLost, Permanent, Queue, Release, Transient, create_pool, task


def test_the_public_names_are_exported():
    for name in ("Queue", "task", "Transient", "Permanent", "Release", "LeaseLost", "create_pool"):
        assert name in jobfeed.__all__
    assert all((Queue, task, LeaseLost, create_pool))
    # and what the README names besides (every name in __all__ is importable)
    for name in ("Submission", "QueueError", "http_errors", "check_response", "FileNotFound", "FileGone"):
        assert name in jobfeed.__all__
    assert all(hasattr(jobfeed, name) for name in jobfeed.__all__)


def test_errors_take_code_message_and_an_optional_retry_after():
    # "raise Transient, Permanent or Release (with code, message, optional retry_after)"
    for cls in (Transient, Permanent, Release):
        plain = cls("busy", "try later")
        assert (plain.code, plain.message, plain.retry_after) == ("busy", "try later", None)
        assert cls("busy", "try later", 5).retry_after == 5
        assert cls("busy", "try later", retry_after=2.5).retry_after == 2.5
        assert cls("busy").message == "busy"


async def test_a_malformed_id_is_an_unknown_job_or_request(queue):
    """Before: asyncpg's DataError from get_job, wait and leave; the README says
    None for an unknown job, and leave's not_found for an unknown request."""
    from jobfeed.worker.queue import QueueError
    import pytest
    for bad in ("abc", "", "01a2-not-a-uuid"):
        assert await queue.get_job(bad) is None
        assert await queue.wait(bad, 0.1) is None
        with pytest.raises(QueueError) as refused:
            await queue.leave(bad)
        assert refused.value.code == "not_found"
