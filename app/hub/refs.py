"""A model named by its Hugging Face id: ``org/name``, optionally ``org/name@revision`` (a
branch, a tag or a commit: the spelling of ``huggingface_hub``'s ``HfFileSystem`` paths), and
the refusals a fetch answers with, each naming the request's field.

Only these shapes are accepted, so no request can name another address: the id becomes a path
under the configured endpoint (``HF_ENDPOINT``) and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import estimator
from estimator.errors import SpecError

__all__ = ["HubRef", "HubRefusal", "catalog_id_of", "is_hub_ref", "parse_ref"]

# huggingface_hub's validate_repo_id: letters, digits, '-', '_', '.', at most 96 characters a
# part, no '--' or '..', not starting or ending with '-' or '.'.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REF = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[A-Za-z0-9._/-]{{1,128}}))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
ID_RULE = (
    "must be a catalog model id, or a Hugging Face id 'org/name' with an optional"
    " '@revision' (a branch, tag or commit)"
)


class HubRefusal(SpecError):
    """A Hugging Face id that cannot be read: ``status`` is the API's answer (404 unknown
    repository or revision, 403 gated or private, 422 a repository that holds no readable
    config, 424 the hub unreachable or too slow), ``kind`` its error name."""

    def __init__(
        self, field: str, rule: str, value: object = None, status: int = 422, kind: str = ""
    ) -> None:
        super().__init__(field, rule, value)
        self.status = status
        self.kind = kind or {
            403: "forbidden",
            404: "not_found",
            424: "unavailable",
        }.get(status, "invalid_plan")


@dataclass(frozen=True)
class HubRef:
    """A parsed id: the repository and the revision asked for (None: the default branch)."""

    repo_id: str
    revision: str | None = None

    @property
    def text(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"

    @property
    def pinned(self) -> bool:
        """Whether the revision is a full commit hash (its files never change)."""
        return self.revision is not None and COMMIT.match(self.revision) is not None


def is_hub_ref(ref: object) -> bool:
    """Whether a request's ``model`` string names a Hugging Face id (catalog and team ids hold
    no '/')."""
    return isinstance(ref, str) and "/" in ref


def parse_ref(ref: str, field: str = "model") -> HubRef:
    """``ref`` as a HubRef; HubRefusal (422) naming ``field`` for any other shape."""
    match = _REF.match(ref.strip())
    repo = match.group("repo") if match else ""
    revision = match.group("revision") if match else None
    bad_revision = revision is not None and (".." in revision or revision.startswith("/"))
    if match is None or "--" in repo or ".." in repo or bad_revision:
        raise HubRefusal(field, ID_RULE, ref, status=422, kind="invalid_plan")
    return HubRef(repo, revision)


@cache
def _catalog_by_hf_id() -> dict[str, str]:
    """The public catalog's ids by their lower-cased ``hf_id`` (the Hub's ids are
    case-insensitive)."""
    out: dict[str, str] = {}
    for model_id in estimator.model_ids():
        hf_id = estimator.model_entry(model_id).get("hf_id")
        if isinstance(hf_id, str) and hf_id:
            out.setdefault(hf_id.lower(), model_id)
    return out


def catalog_id_of(repo_id: str) -> str | None:
    """The public catalog entry whose ``hf_id`` is ``repo_id``, if any."""
    return _catalog_by_hf_id().get(repo_id.lower())
