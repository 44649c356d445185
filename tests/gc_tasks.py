"""Says how the process's garbage collector is set, for the tests of the
long-running processes' tuning: in the refusal of any "gcreport" payload (an
API process validates submissions) and on stderr as the process exits."""

import atexit
import gc
import sys

from jobfeed import task


def collector() -> str:
    return f"gc young={gc.get_threshold()[0]} frozen={gc.get_freeze_count()}"


def _refuse(payload: dict) -> None:
    raise ValueError(collector())


@task("gcreport", validate=_refuse)
async def gcreport(job, ctx):
    return None


atexit.register(lambda: print(collector(), file=sys.stderr, flush=True))
