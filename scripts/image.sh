#!/bin/sh
# The service image's two steps. The Dockerfile runs them, and tests/test_image.py runs them in a
# clean virtualenv, so what the image does is tested without a container engine.
#
#   scripts/image.sh build   install the project (not editable) and its dependencies into the
#                            current Python, then check that the service and the CLI load
#   scripts/image.sh start   run the service, which applies the plan store's migrations once
#                            before its workers start (settings from the environment: see the
#                            README's settings table); exec, so SIGTERM reaches it
#
# The service runs from this source tree (static/, templates/ and the migrations live beside
# the packages, and the wheel does not carry them), with the dependencies the build installed.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python}

case "${1:-}" in
build)
    "$PYTHON" -m pip install "$ROOT"
    cd "$ROOT"
    "$PYTHON" -c "import app.main, app.cli"
    "$PYTHON" -m app.cli --help >/dev/null
    ;;
start)
    cd "$ROOT"
    exec "$PYTHON" -m app.cli serve
    ;;
*)
    echo "usage: $0 build|start" >&2
    exit 2
    ;;
esac
