#!/bin/sh
# Builds Wharf's wheel from the source tree in the working directory and installs it, with every
# dependency at the version constraints.txt pins, into a new virtual environment.
#
#   sh docker/install.sh VENV [EXTRAS]        EXTRAS: empty, or "spark" for PySpark and pyarrow
#
# The image's build stage runs it (Dockerfile); tests/packaging/test_wheel.py runs the same line, so
# the image and the test install Wharf the same way.
set -eu
venv=$1
extras=${2:-}
wheels=$(mktemp -d)
python -m pip wheel --no-deps --wheel-dir "$wheels" .
python -m venv "$venv"
wheel=$(ls "$wheels"/wharf-*.whl)
"$venv/bin/python" -m pip install --constraint constraints.txt "$wheel${extras:+[$extras]}"
rm -rf "$wheels"
