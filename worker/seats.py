"""Turns at waking up among the workers of a kind (see Seats)."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Sequence

from . import db
from .waits import wait_event

log = logging.getLogger("jobfeed.worker")

_DUE = re.compile(r"([0-9]{1,9}):([0-9]{1,9}):(.+)", re.DOTALL)


class Seats:
    """Turns at waking up. For each of its kinds, a worker with free slots holds
    a numbered seat: an advisory lock on a connection of its own, so a dead
    worker's seat frees itself. jobfeed_due says 'count:offset:kind' (see
    notify_due), and only the `count` seated workers from the offset on (by
    rank among the kind's seats) wake for it; a submit of one job wakes one
    worker. A full worker gives up its seats (it claims when a slot frees
    anyway), so turns go to workers that can take the job. Each worker re-reads
    the seats every REFRESH seconds; a turn that lands on a stale seat costs
    latency (the poll finds the job), never a job. Without a seat view (not
    connected yet, the database restarting), every notification wakes."""

    REFRESH = 1.0
    MAX_SEATS = 4096

    def __init__(self, dsn: str, kinds: Sequence[str], name: str):
        self.dsn = dsn
        self.kinds = list(kinds)
        self.name = name
        self.want = True
        self._held: dict[str, int] = {}
        self._view: dict[str, tuple[int, int]] = {}  # kind -> (my rank, seats taken)
        self._changed = asyncio.Event()

    def seated(self, want: bool) -> None:
        """Hold seats (free slots) or give them up (full)."""
        if want != self.want:
            self.want = want
            self._changed.set()

    def wakes_me(self, payload: str) -> bool | None:
        """Whether this notification is for us: None when it is not for our kinds."""
        # Strict: any role may NOTIFY, and a bad payload must not raise here.
        match = _DUE.fullmatch(payload)
        if match:
            count, offset, kind = int(match[1]), int(match[2]), match[3]
        else:
            count, offset, kind = 0, 0, payload  # the kind alone: everyone wakes
        if kind not in self.kinds:
            return None
        if count == 0:
            return True
        if not self.want:
            return False  # full: it claims by itself when a slot frees
        view = self._view.get(kind)
        if view is None:
            return True
        rank, taken = view
        return count >= taken or (rank - offset) % taken < count

    async def run(self) -> None:
        delay = 0.1
        while True:
            conn = None
            try:
                conn = await db.connect(db.direct(self.dsn), name=self.name)  # its locks live in the session
                self._held.clear()
                delay = 0.1
                while True:
                    self._changed.clear()
                    await self._reconcile(conn)
                    await asyncio.sleep(0.1)  # a worker hovering at full flips its seats at most this often
                    await wait_event(self._changed, self.REFRESH)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: wake on everything meanwhile
                self._view.clear()
                self._held.clear()
                log.warning("%s: seats lost (%s); again in %.1fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                if conn is not None:
                    conn.terminate()  # the seats go with the session

    async def _reconcile(self, conn) -> None:
        ns = "hashtext('jobfeed_due:' || $1) & 2147483647"
        for kind in self.kinds:
            if self.want and kind not in self._held:
                seat = await conn.fetchval(
                    f"select s from generate_series(0, {self.MAX_SEATS - 1}) s "
                    f"where pg_try_advisory_lock({ns}, s) limit 1", kind)
                if seat is not None:
                    self._held[kind] = seat
            elif not self.want and kind in self._held:
                await conn.fetchval(f"select pg_advisory_unlock({ns}, $2)", kind, self._held.pop(kind))
        rows = await conn.fetch(
            f"""select k.kind, array(select l.objid::text::int from pg_locks l
                                      where l.locktype = 'advisory' and l.granted and l.objsubid = 2
                                        and l.database = (select d.oid from pg_database d
                                                           where d.datname = current_database())
                                        and l.classid = ({ns.replace('$1', 'k.kind')})::oid
                                      order by l.objid::text::int) as seats
                  from unnest($1::text[]) k(kind)""", self.kinds)
        view = {}
        for row in rows:
            seat = self._held.get(row["kind"])
            if seat is not None and seat in row["seats"]:
                view[row["kind"]] = (row["seats"].index(seat), len(row["seats"]))
        self._view = view
