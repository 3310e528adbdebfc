"""The README's and the guide's printed examples stay current (issue 39, item 9): each
``console`` block's command that shows output is run (``llm-planner`` in process, through
``app.cli.main``) and the lines it shows must be lines of the output, in order; a line ``...``
stands for lines left out, elsewhere the shown lines are consecutive. The API's refusal printed
as JSON is asked of the API (TestClient) and must be its answer.

Bounded to the pages that print outputs: README.md and docs/cli.md (the commands), docs/api.md
(the refusal). Commands that print nothing shown (``> replicas.csv``, ``| jq``) are left out.
Where a figure drifts, re-render the block from the command's output."""

from __future__ import annotations

import io
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/cli.md")
ELIDED = "..."
PIPED = re.compile(r"^echo '(?P<stdin>.*)' \| llm-planner (?P<args>.*)$")


@dataclass(frozen=True)
class Example:
    page: str
    line: int  # the command's line in the page
    command: str
    shown: tuple[str, ...]  # the lines shown after it, "..." where some are left out


def console_examples(page: str) -> list[Example]:
    """Every ``$ llm-planner ...`` command of the page's ``console`` blocks with the lines shown
    after it."""
    examples: list[Example] = []
    inside = False
    current: tuple[int, str, list[str]] | None = None

    def close() -> None:
        if current is not None:
            examples.append(Example(page, current[0], current[1], tuple(current[2])))

    for number, raw in enumerate((ROOT / page).read_text().splitlines(), 1):
        if raw.startswith("```"):
            if inside:
                close()
                current = None
            inside = raw.strip() == "```console"
            continue
        if not inside:
            continue
        if raw.startswith("$ "):
            close()
            current = (number, raw[2:], [])
        elif current is not None:
            current[2].append(raw)
    return examples


EXAMPLES = [
    e
    for page in PAGES
    for e in console_examples(page)
    if any(line.strip() and line.strip() != ELIDED for line in e.shown)
]


def run_command(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """What ``command`` prints (stdout, then stderr): ``llm-planner ...`` or ``echo '...' |
    llm-planner ...``, run in process."""
    piped = PIPED.match(command)
    stdin, args = (piped["stdin"], piped["args"]) if piped else ("", command)
    argv = shlex.split(args)
    if argv[0] == "llm-planner":
        argv = argv[1:]
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    capsys.readouterr()
    main(argv)
    out, err = capsys.readouterr()
    return out + err


def missing(shown: tuple[str, ...], printed: list[str]) -> str | None:
    """Where ``shown`` (with ``...`` gaps) is not a run of ``printed``'s lines in order: the
    first shown line not found where it should be, else None."""
    at = 0
    free = True  # the next shown line may come after a gap (the first one, or after "...")
    for line in shown:
        if line.strip() == ELIDED:
            free = True
            continue
        if free:
            found = next((i for i in range(at, len(printed)) if printed[i] == line), None)
        else:
            found = at if at < len(printed) and printed[at] == line else None
        if found is None:
            return line
        at, free = found + 1, False
    return None


def test_the_pages_show_examples() -> None:
    """The parser finds what the pages print (the README's train run and its refusal)."""
    readme = [e for e in EXAMPLES if e.page == "README.md"]
    assert [e.command.split(" ", 1)[0] for e in readme] == ["llm-planner", "echo"]
    assert len([e for e in EXAMPLES if e.page == "docs/cli.md"]) >= 3


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.page}:{e.line}")
def test_printed_example_is_current(
    example: Example, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = run_command(example.command, monkeypatch, capsys).splitlines()
    gone = missing(example.shown, printed)
    assert gone is None, (
        f"{example.page}:{example.line} `{example.command}` no longer prints\n  {gone}\n"
        "its output now:\n" + "\n".join(printed[:40])
    )


def test_the_printed_refusal_is_the_apis() -> None:
    """docs/api.md's refusal (and README's ``e.g.``) is what the API answers for tp=3 on
    Llama 3 70B (64 heads)."""
    text = (ROOT / "docs/api.md").read_text()
    block = re.search(r"```json\n(\{\"error\".*?)\n```", text, re.S)
    assert block is not None
    shown = json.loads(block.group(1))
    client = TestClient(app, base_url="http://localhost")
    body = {"model": "llama-3-70b", "layout": {"tp": 3}}
    answer = client.post("/api/v1/training/estimate", json=body)
    assert answer.status_code == 422
    got = answer.json()
    assert {k: got[k] for k in shown} == shown
    readme = (ROOT / "README.md").read_text()
    assert shown["message"] in readme
