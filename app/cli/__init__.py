"""The ``llm-planner`` command line: estimates, sweeps and deep dives from a request file or
flags, saved plans, the service (``serve``) and the store's migrations."""

from __future__ import annotations

from app.cli.commands import main

__all__ = ["main"]
