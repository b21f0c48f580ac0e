#!/usr/bin/env bash
# The extension built with two Cargo profiles, side by side: a wheel of each, each in a venv of its
# own on top of .venv's packages (torch, numpy, Pillow), then the loader-overhead and images
# benchmarks taking turns between the two, ROUNDS rounds (BENCH.md, "Wheel profile").
#
#   bash benches/profiles.sh [PROFILE_A PROFILE_B [ROUNDS]]   default: release wheel 3
#
# Prints each wheel's size and the size of the extension inside, then each run's output. Work
# directory: $DLRS_PROFILES_WORK (default /tmp/dlrs-profiles); the build uses the workspace's
# target dir.
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "${BASH_SOURCE[0]}")/.."
A="${1:-release}" B="${2:-wheel}" ROUNDS="${3:-3}"
WORK="${DLRS_PROFILES_WORK:-/tmp/dlrs-profiles}"
BASE=.venv/bin/python
[[ -x "$BASE" && -x .venv/bin/maturin ]] || { echo "profiles: needs .venv with maturin (cargo xtask py-test makes it)" >&2; exit 2; }
base_site="$("$BASE" -c 'import site; print(site.getsitepackages()[0])')"

for p in "$A" "$B"; do
  rm -rf "$WORK/$p"
  mkdir -p "$WORK/$p/wheel"
  start=$SECONDS
  .venv/bin/maturin build --quiet --profile "$p" -i "$BASE" --out "$WORK/$p/wheel" >&2
  wheel="$(ls "$WORK/$p"/wheel/*.whl)"
  "$BASE" -m venv "$WORK/$p/venv"
  # addsitedir also reads .venv's own .pth files (an overlay venv stays an overlay).
  printf 'import site; site.addsitedir(%s)\n' "'$base_site'" \
    >"$("$WORK/$p/venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/zz_base.pth"
  "$WORK/$p/venv/bin/python" -m pip install -q --no-deps "$wheel"
  so="$("$WORK/$p/venv/bin/python" -c 'import dataloader_rs._native as n; print(n.__file__)')"
  printf 'profile %s: built in %d s; wheel %s bytes; extension %s bytes\n' "$p" $((SECONDS - start)) \
    "$(stat -c %s "$wheel")" "$(stat -c %s "$so")"
done

for round in $(seq "$ROUNDS"); do
  for p in "$A" "$B"; do
    py="$WORK/$p/venv/bin/python"
    printf '\n## round %s, profile %s, load %s\n' "$round" "$p" "$(cut -d' ' -f1 /proc/loadavg)"
    "$py" benches/compare.py overhead first_batch --repeat 7
    "$py" benches/images.py --tiles 1024 --epochs 5
  done
done
