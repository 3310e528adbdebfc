"""The pages' static files (``static/``: the stylesheet, two small scripts, Plotly and the Swagger
UI), served compressed and cached, from the source tree or the installed wheel alike.

- **Versioned URLs.** The templates write each file's URL with its content hash
  (``static_url("site.css")`` -> ``/static/site.css?v=3f1c...``), so a release that changes a
  file changes its URL, and a browser never runs yesterday's script against today's page.
- **Cache-Control.** A URL carrying the file's current version is cached for a year without
  revalidation (``public, max-age=31536000, immutable``); any other URL (no version, or an old
  one) is ``no-cache``: the browser asks again each time, and the ETag answers it with a 304.
- **ETag / If-None-Match.** Each answer carries the content's hash as a strong ETag (the gzip
  body has its own); a request naming it is answered 304 without a body.
- **gzip.** Text files (scripts, styles, JSON, SVG, licences) are compressed once, at level 9,
  and kept in memory; a request whose ``Accept-Encoding`` takes gzip gets them with
  ``Content-Encoding: gzip`` (plotly.min.js: 1.5 MB -> 0.5 MB), and every answer of such a file
  says ``Vary: Accept-Encoding``.

Files are read once per process: all of them in a background thread at start-up (``warm``, from
the app's lifespan, ~0.3 s of one core, so no visitor waits for the compression), any one still
missing when it is first asked for. A file changed on disk after that is served as it was read
until the service restarts, as a release does. The security headers are added around this app
like around every other answer (``app.service.operations.SecurityHeaders``).
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qs

from anyio import to_thread
from starlette.exceptions import HTTPException
from starlette.responses import Response

from app.service.errors import Receive, Scope, Send
from app.web.assets import STATIC

__all__ = ["IMMUTABLE", "REVALIDATE", "Asset", "StaticAssets", "static_files", "static_url"]

IMMUTABLE = "public, max-age=31536000, immutable"  # a year: the customary ceiling
REVALIDATE = "no-cache"
GZIP_LEVEL = 9  # compressed once per process, so the smallest output is worth its ~0.2 s
# Media types that gzip shrinks (besides text/*); images and fonts are compressed already.
COMPRESSIBLE = frozenset({"application/javascript", "application/json", "image/svg+xml"})
VERSION_HEX = 12  # hex digits of the content hash in a URL: 48 bits, no collision in practice


@dataclass(frozen=True)
class Asset:
    """One static file as read: its bytes, their gzip (None where gzip does not make them
    smaller) and the content's hash."""

    body: bytes
    gzipped: bytes | None
    media_type: str
    digest: str

    @property
    def version(self) -> str:
        return self.digest[:VERSION_HEX]

    @classmethod
    def read(cls, path: Path) -> Asset:
        body = path.read_bytes()
        media_type = mimetypes.guess_type(path.name)[0] or "text/plain"
        gzipped = None
        if media_type.startswith("text/") or media_type in COMPRESSIBLE:
            packed = gzip.compress(body, GZIP_LEVEL, mtime=0)
            gzipped = packed if len(packed) < len(body) else None
        return cls(body, gzipped, media_type, hashlib.sha256(body).hexdigest())


def _header(scope: Scope, name: bytes) -> str:
    values = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k == name]
    return ",".join(values)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip: named (or ``*``) without ``q=0``."""
    allowed: dict[str, bool] = {}
    for item in accept_encoding.lower().split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        allowed[coding] = not any(_zero_weight(p) for p in params)
    return allowed.get("gzip", allowed.get("x-gzip", allowed.get("*", False)))


def _zero_weight(param: str) -> bool:
    """Whether a coding's parameter is ``q=0`` (refused); a weight that does not parse is
    taken as given."""
    name, _, value = param.replace(" ", "").partition("=")
    try:
        return name == "q" and float(value) == 0
    except ValueError:
        return False


def matches(if_none_match: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` value names ``etag`` (weak comparison, RFC 9110 13.1.2)."""
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return "*" in tags or etag in tags


class StaticAssets:
    """An ASGI app serving the files under ``root`` as described above (GET and HEAD)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._assets: dict[str, Asset] = {}
        self._lock = threading.Lock()

    def _file(self, name: str) -> Path | None:
        """The file ``name`` (a path under the root) names, or None: nothing outside the root,
        no hidden files, no directories."""
        parts = PurePosixPath(name).parts
        if not parts or any(p in ("..", ".") or p.startswith(".") or "\\" in p for p in parts):
            return None
        path = self.root.joinpath(*parts).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return None
        return path

    def asset(self, name: str) -> Asset | None:
        """The file ``name`` as read (reading it now if it has not been), or None."""
        found = self._assets.get(name)
        if found is not None:
            return found
        path = self._file(name)
        if path is None:
            return None
        with self._lock:
            found = self._assets.get(name)
            if found is None:
                found = self._assets[name] = Asset.read(path)
        return found

    @property
    def loaded(self) -> frozenset[str]:
        """The files read so far."""
        return frozenset(self._assets)

    def url(self, name: str) -> str:
        """``/static/<name>?v=<version>``: the URL templates write for a file."""
        found = self.asset(name)
        if found is None:
            raise LookupError(f"no static file {name!r} under {self.root}")
        return f"/static/{name}?v={found.version}"

    def warm(self) -> None:
        """Read (and compress) every file now."""
        for path in sorted(self.root.rglob("*")):
            name = path.relative_to(self.root).as_posix()
            if self._file(name) is not None:
                self.asset(name)

    def warm_in_background(self) -> threading.Thread:
        """``warm`` in a daemon thread (a request for a file not read yet reads it itself)."""
        thread = threading.Thread(target=self.warm, name="static-warm", daemon=True)
        thread.start()
        return thread

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise HTTPException(404)
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            raise HTTPException(405, headers={"Allow": "GET, HEAD"})
        # Mounted, the request's path still holds the mount point, which ``root_path`` names.
        name = str(scope.get("path", "")).removeprefix(scope.get("root_path", "")).lstrip("/")
        found = self._assets.get(name)
        if found is None:  # not read yet: read it off the event loop
            found = await to_thread.run_sync(self.asset, name)
        if found is None:
            raise HTTPException(404)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        current = query.get("v") == [found.version]
        gzipped = found.gzipped if accepts_gzip(_header(scope, b"accept-encoding")) else None
        use_gzip = gzipped is not None
        body = gzipped if gzipped is not None else found.body
        etag = f'"{found.digest[:32]}{"-gzip" if use_gzip else ""}"'
        headers = {"ETag": etag, "Cache-Control": IMMUTABLE if current else REVALIDATE}
        if found.gzipped is not None:
            headers["Vary"] = "Accept-Encoding"
        if matches(_header(scope, b"if-none-match"), etag):
            await Response(status_code=304, headers=headers)(scope, receive, send)
            return
        if use_gzip:
            headers["Content-Encoding"] = "gzip"
        headers["Content-Length"] = str(len(body))
        content = b"" if method == "HEAD" else body
        await Response(content, media_type=found.media_type, headers=headers)(scope, receive, send)


static_files = StaticAssets(STATIC)


def static_url(name: str) -> str:
    """The versioned URL of the static file ``name`` (the templates' ``static_url``)."""
    return static_files.url(name)
