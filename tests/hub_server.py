"""A Hugging Face Hub on loopback for the tests: the file layout and the headers that
``huggingface_hub`` reads (``get_hf_file_metadata``'s HEAD and ``hf_hub_download``'s GET of
``/{org}/{name}/resolve/{revision}/{file}``; huggingface_hub/file_download.py, utils/_http.py).

- 200: ``X-Repo-Commit`` (the commit the revision resolves to), ``ETag`` (the blob's name in
  the cache), ``Content-Length`` (what the size check reads before any download).
- Errors carry the Hub's ``X-Error-Code``, which ``hf_raise_for_status`` turns into its typed
  errors: ``RepoNotFound`` (404), ``RevisionNotFound`` (404), ``EntryNotFound`` (404, with the
  commit), ``GatedRepo`` (401 without a token, 403 with a wrong one).
- A repository may be slow (every answer after ``slow_s``) and a file may be a size only (an
  oversized file whose body is never meant to be asked for).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

__all__ = ["HubServer", "Repo"]


@dataclass
class Repo:
    """One repository: its files at its commit (bytes, a JSON-able object, or an int: a file
    of that many bytes), the revisions that name the commit, and how it answers."""

    files: dict[str, Any]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    gated_token: str | None = None  # set: gated, this token has access
    slow_s: float = 0.0

    def body(self, name: str) -> bytes | int:
        value = self.files[name]
        if isinstance(value, bytes | int):
            return value
        return json.dumps(value).encode()


@dataclass
class HubServer:
    """A threaded HTTP server on 127.0.0.1 serving ``repos``; ``requests`` logs each
    (method, path, whether it carried the token)."""

    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, method: str, path: str, auth: str | None) -> tuple[int, dict[str, str], bytes]:
        self.requests.append((method, path))
        parts = unquote(path.split("?")[0]).strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return 404, {"X-Error-Code": "RepoNotFound"}, b"not found"
        repo_id, revision, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        repo = self.repos.get(repo_id)
        if repo is None:
            return 401 if auth is None else 404, {"X-Error-Code": "RepoNotFound"}, b""
        time.sleep(repo.slow_s)
        if repo.gated_token is not None and auth != f"Bearer {repo.gated_token}":
            return 401 if auth is None else 403, {"X-Error-Code": "GatedRepo"}, b""
        if revision not in (*repo.revisions, repo.commit):
            return 404, {"X-Error-Code": "RevisionNotFound"}, b""
        if name not in repo.files:
            return 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo.commit}, b""
        body = repo.body(name)
        size = body if isinstance(body, int) else len(body)
        data = b" " * size if isinstance(body, int) and method == "GET" else body
        etag = hashlib.sha256(data if isinstance(data, bytes) else str(size).encode()).hexdigest()
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"', "Content-Length": str(size)}
        return 200, headers, data if isinstance(data, bytes) else b""


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            status, headers, body = hub.answer(method, self.path, self.headers.get("Authorization"))
            self.send_response(status)
            headers.setdefault("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if method == "GET":
                with suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                    self.wfile.write(body)

        def do_HEAD(self) -> None:
            self._reply("HEAD")

        def do_GET(self) -> None:
            self._reply("GET")

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

    return Handler
