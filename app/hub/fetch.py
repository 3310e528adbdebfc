"""The service's one door to the Hugging Face Hub: a repository's ``config.json``, its ModelOpt
``hf_quant_config.json`` and its ``model.safetensors.index.json``, through ``huggingface_hub``
(imported on the first fetch: start-up and every catalog plan never load it).

Bounds: every file's size is read first (a HEAD, ``get_hf_file_metadata``, with no retries)
and a file over its limit is never downloaded; all of one model's requests share one deadline
(``PLANNER_HF_TIMEOUT_S``). Only ``HF_ENDPOINT`` is asked, with the configured token only
(``PLANNER_HF_TOKEN``; never another from the environment or a login). Files land in the Hub's
cache layout under ``PLANNER_HF_CACHE_DIR``: a pinned commit is read from it with no request,
and where the hub does not answer (or ``PLANNER_HF_OFFLINE``) the cached revision is read.
Nothing fetched is executed: the files are parsed as JSON and nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.hub.refs import COMMIT, HubRef, HubRefusal
from app.service.exceptions import ShapeError
from app.service.guards import parse_json
from app.settings import Settings

__all__ = ["CONFIG", "INDEX", "INDEX_MAX_BYTES", "QUANT_CONFIG", "Fetched", "fetch"]

CONFIG = "config.json"
QUANT_CONFIG = "hf_quant_config.json"
INDEX = "model.safetensors.index.json"
# A 671B MoE's index (DeepSeek-V3, ~92k tensors with their scales) is ~9 MB; over this, the
# parameter cross-check is skipped with a note.
INDEX_MAX_BYTES = 32 * 2**20
JSON_MAX_DEPTH = 64  # config.json nests a few levels (text_config, quantization_config)


@dataclass(frozen=True)
class Fetched:
    """What one fetch read: the commit the revision resolved to, the files (None: absent),
    whether the hub answered (False: the cache's copy), and notes on files not read."""

    commit: str
    config: dict[str, Any]
    quant_config: dict[str, Any] | None
    index: dict[str, Any] | None
    from_cache: bool
    notes: tuple[str, ...] = ()


class _Unreachable(Exception):
    """The hub did not answer (a transport error, a timeout, a 5xx, not a hub)."""


def _hf() -> Any:
    import huggingface_hub
    from huggingface_hub.utils import disable_progress_bars  # type: ignore[attr-defined]

    disable_progress_bars()  # a service has no terminal to draw them on
    return huggingface_hub


class _Session:
    """One model's fetch: its settings, its deadline and the notes it gathers."""

    def __init__(self, settings: Settings, ref: HubRef, field: str) -> None:
        self.s, self.ref, self.field = settings, ref, field
        self.hf = _hf()
        import httpx2  # huggingface_hub's HTTP client: its transport errors and timeouts

        self.http_error: type[Exception] = httpx2.HTTPError
        self.cache_dir = str(settings.hf_cache_dir or settings.data_dir / "hf-cache")
        self.token: str | bool = settings.hf_token or False  # False: never an ambient token
        self.deadline = time.monotonic() + settings.hf_timeout_s
        self.notes: list[str] = []
        self.from_cache = False

    def refuse(self, rule: str, status: int) -> HubRefusal:
        return HubRefusal(self.field, rule, self.ref.text, status=status)

    def left_s(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Unreachable(f"no answer within {self.s.hf_timeout_s} s (PLANNER_HF_TIMEOUT_S)")
        return left

    def cached(self, revision: str | None, name: str) -> tuple[bool, Path | None]:
        """What the cache knows of ``name`` at ``revision``: whether it knows, and its copy
        (None where it knows the file is absent)."""
        hit = self.hf.try_to_load_from_cache(
            self.ref.repo_id, name, cache_dir=self.cache_dir, revision=revision
        )
        if isinstance(hit, str):
            return True, Path(hit)
        return hit is not None, None

    def file(self, revision: str | None, name: str, limit: int, immutable: bool) -> Path | None:
        """``name`` at ``revision`` (None: absent from the repository). ``immutable``: the
        revision is a commit, so a cached copy is read without asking."""
        knows, copy = self.cached(revision, name)
        if knows and (immutable or self.s.hf_offline):
            self.from_cache = self.from_cache or (self.s.hf_offline and name == CONFIG)
            return copy
        if self.s.hf_offline:
            raise _Unreachable("offline (PLANNER_HF_OFFLINE) and not in the cache")
        try:
            return self._download(revision, name, limit)
        except _Unreachable:
            if knows:  # the hub is down or slow: the cached revision
                self.from_cache = True
                return copy
            raise

    def _download(self, revision: str | None, name: str, limit: int) -> Path | None:
        hf, errors = self.hf, self.hf.errors
        endpoint = self.s.hf_endpoint
        url = hf.hf_hub_url(self.ref.repo_id, name, revision=revision, endpoint=endpoint)
        try:
            meta = hf.get_hf_file_metadata(
                url, token=self.token, timeout=self.left_s(), endpoint=endpoint
            )
            if meta.size is not None and meta.size > limit:
                self._too_big(name, meta.size, limit)
                return None
            path = Path(
                hf.hf_hub_download(
                    self.ref.repo_id, name, revision=meta.commit_hash,
                    cache_dir=self.cache_dir, token=self.token, endpoint=endpoint,
                    etag_timeout=self.left_s(),
                )
            )  # fmt: skip
        except HubRefusal:
            raise
        except errors.RemoteEntryNotFoundError:
            if revision is not None and COMMIT.match(revision):
                self._absent(revision, name)
            return None
        except errors.GatedRepoError:
            raise self.refuse(self._locked("is gated"), 403) from None
        except errors.RevisionNotFoundError:
            rule = f"revision {self.ref.revision!r} is not a branch, tag or commit of it"
            raise self.refuse(f"{self.ref.repo_id}: {rule}", 404) from None
        except errors.RepositoryNotFoundError:
            raise self.refuse(self._locked("is not a repository on " + endpoint), 404) from None
        except errors.HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if status in (401, 403):
                raise self.refuse(self._locked("refused access"), 403) from None
            raise _Unreachable(f"it answered HTTP {status}") from None
        except errors.FileMetadataError:
            raise _Unreachable(
                "it does not answer as a Hugging Face Hub (no X-Repo-Commit)"
            ) from None
        except (self.http_error, OSError, ValueError) as exc:  # transport errors, timeouts
            raise _Unreachable(f"{type(exc).__name__}: {exc}") from None
        size = path.stat().st_size
        if size > limit:  # a HEAD that understated the size
            path.unlink(missing_ok=True)
            self._too_big(name, size, limit)
            return None
        if revision is not None and revision != meta.commit_hash:
            self._remember(revision, str(meta.commit_hash))
        elif revision is None:
            self._remember("main", str(meta.commit_hash))
        return path

    def _locked(self, what: str) -> str:
        hint = (
            "the token (PLANNER_HF_TOKEN) has no access to it"
            if self.s.hf_token
            else "a gated or private repository needs a token: set PLANNER_HF_TOKEN"
        )
        return f"{self.ref.repo_id} {what}; {hint}"

    def _too_big(self, name: str, size: int, limit: int) -> None:
        if name == CONFIG:
            rule = (
                f"its {name} is {size:,} bytes, over the {limit:,}-byte limit"
                " (PLANNER_HF_MAX_CONFIG_BYTES)"
            )
            raise self.refuse(rule, 422)
        self.notes.append(f"{name} ({size:,} bytes, over {limit:,}) was not read.")

    def _absent(self, commit: str, name: str) -> None:
        """The file's absence at a commit in the cache (``.no_exist``, as ``hf_hub_download``
        records it), so a cached read knows it is absent rather than unknown."""
        folder = self.hf.file_download.repo_folder_name(repo_id=self.ref.repo_id, repo_type="model")
        marker = Path(self.cache_dir, folder, ".no_exist", commit, name)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()

    def _remember(self, revision: str, commit: str) -> None:
        """The revision's commit in the cache's ``refs`` (as ``hf_hub_download`` writes it for
        a branch or tag), so an offline read finds the revision."""
        folder = self.hf.file_download.repo_folder_name(repo_id=self.ref.repo_id, repo_type="model")
        ref_path = Path(self.cache_dir, folder, "refs", revision)
        ref_path.parent.mkdir(parents=True, exist_ok=True)
        ref_path.write_text(commit)


def _json(session: _Session, path: Path, name: str) -> dict[str, Any]:
    try:
        value = parse_json(path.read_bytes(), name, JSON_MAX_DEPTH)
    except ShapeError as exc:
        raise session.refuse(f"its {name} is not readable: {exc.rule}", 422) from None
    if not isinstance(value, dict):
        raise session.refuse(f"its {name} must be a JSON object", 422)
    return value


def _optional(session: _Session, commit: str, name: str, limit: int) -> dict[str, Any] | None:
    """An optional file at the resolved commit; past the deadline or unreadable, a note."""
    try:
        path = session.file(commit, name, limit, immutable=True)
    except _Unreachable as exc:
        session.notes.append(f"{name} was not read: the hub did not answer ({exc}).")
        return None
    if path is None:
        return None
    try:
        return _json(session, path, name)
    except HubRefusal as exc:
        session.notes.append(f"{name} was not read: {exc.rule}.")
        return None


def fetch(settings: Settings, ref: HubRef, field: str, *, cross_check: bool = True) -> Fetched:
    """Read ``ref``'s files; HubRefusal naming ``field`` where its config cannot be read."""
    session = _Session(settings, ref, field)
    try:
        path = session.file(ref.revision, CONFIG, settings.hf_max_config_bytes, ref.pinned)
    except _Unreachable as exc:
        rule = (
            f"the hub at {settings.hf_endpoint} could not be read ({exc}), and {ref.text} is not"
            " in the cache"
        )
        raise session.refuse(rule, 424) from None
    if path is None:
        raise session.refuse(
            f"{ref.text} has no {CONFIG}: not a transformers model repository", 422
        )
    config = _json(session, path, CONFIG)
    commit = path.parent.name  # the cache's snapshots/<commit>/config.json
    quant = None
    if "quantization_config" not in config:
        quant = _optional(session, commit, QUANT_CONFIG, settings.hf_max_config_bytes)
    index = _optional(session, commit, INDEX, INDEX_MAX_BYTES) if cross_check else None
    return Fetched(commit, config, quant, index, session.from_cache, tuple(session.notes))
