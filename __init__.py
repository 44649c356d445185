"""jobfeed: a PostgreSQL job service. Leased jobs with retries users never see,
shared by everyone who asks for the same target, with live progress over SSE.

    from jobfeed import Queue, create_pool, task, Transient
"""

from .worker.db import create_pool
from .worker.files import FileGone, FileNotFound
from .worker.queue import Job, Queue, QueueError, Submission
from .worker.tasks import (Context, LeaseLost, Permanent, Release, Transient, WaitFor, check_response,
                           http_errors, task)

__all__ = [
    "Context", "FileGone", "FileNotFound", "Job", "LeaseLost", "Permanent", "Queue", "QueueError", "Release",
    "Submission", "Transient", "WaitFor", "check_response", "create_pool", "http_errors", "task",
]
