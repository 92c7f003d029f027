"""Our own static files, served under content-hashed names and cached for a year.

``app.js`` is served as ``/static/app.<hash>.js``: a changed file gets a new URL, so browsers
may keep every URL forever (``immutable``) and never run a stale script after a deploy. The
manifest is built once when the app is created; nothing is fetched or built at run time.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from litestar import Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from shared import errors

PREFIX = "/static"
CACHE_FOREVER = "public, max-age=31536000, immutable"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".svg": "image/svg+xml"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str


class Assets:
    def __init__(self, directory: Path) -> None:
        self._urls: dict[str, str] = {}
        self._files: dict[str, Asset] = {}
        for path in sorted(p for p in directory.iterdir() if p.is_file()):
            body = path.read_bytes()
            digest = hashlib.sha256(body).hexdigest()[:12]
            hashed = f"{path.stem}.{digest}{path.suffix}"
            media_type = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
            self._urls[path.name] = f"{PREFIX}/{hashed}"
            self._files[hashed] = Asset(body, media_type or "application/octet-stream")

    def url(self, name: str) -> str:
        """The versioned URL of a file in static/ (a missing name fails the page loudly)."""
        return self._urls[name]

    def route(self) -> HTTPRouteHandler:
        files = self._files

        @get(f"{PREFIX}/{{name:str}}", opt={"public": True}, include_in_schema=False,
             sync_to_thread=False)
        def static_asset(name: FromPath[str]) -> Response:
            asset = files.get(name)
            if asset is None:
                # An old hash after a deploy: the page that asked is stale and reloads anyway.
                raise errors.NotFound("No such file; reload the page.")
            return Response(asset.body, media_type=asset.media_type,
                            headers={"Cache-Control": CACHE_FOREVER,
                                     "X-Content-Type-Options": "nosniff"})

        return static_asset
