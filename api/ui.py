"""The web UI's pages: plain files from static/."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response

STATIC_DIR = Path(str(importlib.resources.files("jobfeed") / "static"))


def _page(name: str):
    async def page(request: Request) -> Response:
        path = STATIC_DIR / name
        if not path.is_file():
            raise HTTPException(404, f"{name} is missing from static/")
        return FileResponse(path, media_type="text/html; charset=utf-8",
                            headers={"Cache-Control": "no-cache"})
    page.__name__ = name.removesuffix(".html") + "_page"
    return page


index = _page("index.html")
job_page = _page("job.html")
admin_page = _page("admin.html")
