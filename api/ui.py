"""The web UI's pages: plain files from static/."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Callable

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response

from jobfeed.worker.settings import Settings

from .state import services

STATIC_DIR = Path(str(importlib.resources.files("jobfeed") / "static"))

# The job page's share panel says who can open the link: the page reads the
# mode from this tag, which the file carries with the default's value.
JOB_ACCESS_META = '<meta name="jobfeed-job-access" content="{}">'
# The grace the job page's closing beacon asks for (JOBFEED_LEAVE_GRACE); the
# file carries none, which leaves at once.
LEAVE_GRACE_META = '<meta name="jobfeed-leave-grace" content="{}">'


def _job_page_settings(html: str, settings: Settings) -> str:
    html = html.replace(JOB_ACCESS_META.format("link"), JOB_ACCESS_META.format(settings.job_access), 1)
    return html.replace(LEAVE_GRACE_META.format(""), LEAVE_GRACE_META.format(f"{settings.leave_grace:g}"), 1)


def _page(name: str, fill: Callable[[str, Settings], str] | None = None):
    async def page(request: Request) -> Response:
        path = STATIC_DIR / name
        if not path.is_file():
            raise HTTPException(404, f"{name} is missing from static/")
        headers = {"Cache-Control": "no-cache"}
        if fill is None:
            return FileResponse(path, media_type="text/html; charset=utf-8", headers=headers)
        html = await anyio.Path(path).read_text(encoding="utf-8")
        return HTMLResponse(fill(html, services(request).settings), headers=headers)
    page.__name__ = name.removesuffix(".html") + "_page"
    return page


index = _page("index.html")
job_page = _page("job.html", _job_page_settings)
admin_page = _page("admin.html")
