"""The web UI: one page (`/`) and its scripts and styles under `/ui/`, plain files shipped
with the package. They hold no data and are public; the page's scripts log in to the API
with HTTP Basic, as any other client of it."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from aiohttp import web
from lavin.management.http.replies import ObjectNotFound

UI_DIR: Final = Path(__file__).parent.parent / "ui"  # the UI's files sit in the management package
# Only the files shipped are served: a path is looked up, never joined onto the folder.
UI_FILES: Final = {path.relative_to(UI_DIR).as_posix(): path for path in UI_DIR.rglob("*") if path.is_file()}
# The page builds every element from the API's data as text, never as markup; the policy
# forbids inline scripts and other origins in case a value ever slipped through.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A new release's page and scripts replace the old ones at once.
    "Cache-Control": "no-cache",
}

routes = web.RouteTableDef()


@routes.get("/")
async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(UI_FILES["index.html"], headers=SECURITY_HEADERS)


@routes.get("/ui/{path:.+}")
async def ui_file(request: web.Request) -> web.FileResponse:
    path = UI_FILES.get(request.match_info["path"])
    if path is None:
        raise ObjectNotFound
    return web.FileResponse(path, headers=SECURITY_HEADERS)
