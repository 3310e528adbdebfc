#!/bin/sh
# The service image's steps. The Dockerfile runs them (the build stage makes the wheel, the
# runtime stage installs it and starts it, with no source tree), and tests/test_image.py runs
# them in clean virtualenvs, so what the image does is tested without a container engine.
#
#   scripts/image.sh wheel            build the project's wheel into ./dist (the pages' templates
#                                     and static files inside it)
#   scripts/image.sh install WHEEL    install the wheel and its dependencies into the current
#                                     Python, then check that the service and the CLI load
#   scripts/image.sh start            run the service (settings from the environment: see the
#                                     docs' settings table), which applies the plan store's
#                                     migrations once before its workers start; exec, so SIGTERM
#                                     reaches it
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python}

case "${1:-}" in
wheel)
    "$PYTHON" -m pip wheel --no-deps --wheel-dir "$ROOT/dist" "$ROOT"
    ;;
install)
    "$PYTHON" -m pip install "${2:?the wheel to install}"
    "$PYTHON" -c "import app.main, app.cli"
    llm-planner --help >/dev/null
    ;;
start)
    exec llm-planner serve
    ;;
*)
    echo "usage: $0 wheel | install WHEEL | start" >&2
    exit 2
    ;;
esac
