"""``python -m app.cli``: the ``llm-planner`` command."""

import sys

from app.cli.commands import main

sys.exit(main())
