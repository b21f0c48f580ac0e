#!/usr/bin/env bash
# CPython builds for dataloader-rs: free-threaded 3.13t and 3.14t, and the GIL build of 3.14.
# Build one, make a venv on it, run the suite on it.
#
#   scripts/python-ft.sh interpreter        build /opt/dlrs/python$VERSION unless a good one is there
#   scripts/python-ft.sh venv [DIR]         venv (default: <repo>/.venv-ft...) with the pinned deps
#   scripts/python-ft.sh test [PYTEST ARGS] both of the above, `maturin develop`, pytest tests
#                                           (venv: $DLRS_PYFT_VENV, default as for `venv`)
#
# VERSION is $DLRS_PYFT_VERSION: 3.13t (default), 3.14t or 3.14. Every command is idempotent.
# The build needs root (apt-get, /etc/apt, /opt); see docs/free-threaded.md.
set -euo pipefail
shopt -s inherit_errexit

VERSION="${DLRS_PYFT_VERSION:-3.13t}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC_LIST=/etc/apt/sources.list.d/dlrs-trixie-src.sources
# Downloaded source tarballs, checked again before each use.
TARBALLS="${DLRS_PYFT_TARBALLS:-/opt/dlrs/src}"
POOL=http://deb.debian.org/debian/pool/main/p

# Bookworm binary packages the build needs (bookworm only: trixie is added as deb-src, never as deb).
BUILD_DEPS=(build-essential dpkg-dev xz-utils pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev
  liblzma-dev libsqlite3-dev libreadline-dev uuid-dev)
# Extension modules that must have been built; a missing one means a build dependency was missing.
REQUIRED_MODULES="ssl zlib _ctypes bz2 lzma sqlite3 readline _uuid hashlib"

# Per version: where the sources come from, whether the GIL is off, the venv and its pins.
# Pins (see docs/free-threaded.md for what was checked). Wheels only: never build from source.
case "$VERSION" in
  3.13t)
    MINOR=3.13 FREE_THREADED=1 DEFAULT_VENV="$REPO_ROOT/.venv-ft"
    # Trixie's python3.13 through apt-get source, with Debian's upstream fixes (apply_upstream_fixes).
    SOURCE=apt
    # NumPy 2.4.x and Pillow 12.2.x ship cp313t wheels (Pillow 12.3+ does not); Hypothesis 6.156+
    # has a compiled core built with PyO3 >= 0.29, which refuses 3.13t, so 6.155.x is its last
    # release usable here.
    PINS=("numpy==2.4.*" "pillow==12.2.*" "pytest" "pytest-timeout" "hypothesis<6.156" "maturin>=1.9,<2")
    ;;
  3.14t | 3.14)
    MINOR=3.14 DEFAULT_VENV="$REPO_ROOT/.venv-ft314"
    FREE_THREADED=1
    if [[ "$VERSION" == 3.14 ]]; then FREE_THREADED=0 DEFAULT_VENV="$REPO_ROOT/.venv-314"; fi
    # The pristine upstream release from Debian's pool. The indexes list newer uploads whose files
    # are no longer served, so the .dsc is pinned by its own hash and the tarball is checked
    # against the sha256 the .dsc gives for it.
    SOURCE=pool
    DSC=python3.14_3.14.7-4.dsc
    DSC_SHA256=8decf7d2e2d30a80384b96df3997d63db33e691312450aa69874664420ceda2d
    ORIG=python3.14_3.14.7.orig.tar.xz
    # compression.zstd is new in 3.14.
    BUILD_DEPS+=(libzstd-dev)
    REQUIRED_MODULES+=" _zstd"
    # All of these ship cp314 and cp314t wheels; tokenizers is what the text tests compare with.
    PINS=("numpy==2.4.*" "pillow==13.0.*" "pytest" "pytest-timeout" "hypothesis" "maturin>=1.9,<2" "tokenizers==0.23.*")
    ;;
  *)
    printf 'python-ft: error: DLRS_PYFT_VERSION=%s: choose 3.13t, 3.14t or 3.14\n' "$VERSION" >&2
    exit 2
    ;;
esac

PREFIX="${DLRS_PYFT_PREFIX:-/opt/dlrs/python$VERSION}"
PY="$PREFIX/bin/python$VERSION"
STAMP="$PREFIX/.dlrs-build-ok"
WORK="${DLRS_PYFT_WORK:-/tmp/dlrs-python-$VERSION}"
LOG="$WORK/build.log"

say() { printf 'python-ft: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Run a command with its output going to $LOG; on failure print the tail of the log and stop.
logged() {
  printf '\n+ %s\n' "$*" >>"$LOG"
  if ! "$@" >>"$LOG" 2>&1; then
    say "failed: $*"
    say "last 40 lines of $LOG:"
    tail -n 40 "$LOG" >&2
    exit 1
  fi
}

# True when $PY is a finished build of $VERSION (GIL off by default for a t build, on otherwise)
# with all required modules.
interpreter_ok() {
  [[ -x "$PY" && -f "$STAMP" ]] || return 1
  env -u PYTHON_GIL "$PY" -I - "$FREE_THREADED" "$VERSION" "$REQUIRED_MODULES" <<'EOF' >/dev/null 2>&1
import importlib, os, site, sys, sysconfig
free_threaded, version, modules = int(sys.argv[1]), sys.argv[2], sys.argv[3]
assert f"{sys.version_info.major}.{sys.version_info.minor}{sys.abiflags}" == version
assert (sysconfig.get_config_var("Py_GIL_DISABLED") or 0) == free_threaded
assert sys._is_gil_enabled() is (not free_threaded)
# Upstream layout (a Debian-patched site.py would list dist-packages directories instead).
assert os.path.join(sys.prefix, "lib", f"python{version}", "site-packages") in site.getsitepackages()
for name in modules.split():
    importlib.import_module(name)
EOF
}

# The URI of the machine's existing Debian archive entry (deb822 or one-line format).
debian_uri() {
  local uri
  uri="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' |
    grep -E '/debian/?$' | head -n 1 || true)"
  if [[ -z "$uri" ]]; then
    uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' |
      grep -E '/debian/?$' | head -n 1 || true)"
  fi
  printf '%s\n' "${uri:-http://deb.debian.org/debian}"
}

apt_setup() {
  export DEBIAN_FRONTEND=noninteractive
  local missing=() pkg updated=0
  for pkg in "${BUILD_DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  # The trixie deb-src entry is only for 3.13's source package.
  local want=""
  if [[ "$SOURCE" == apt ]]; then
    want="$(printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
      "$(debian_uri)" /usr/share/keyrings/debian-archive-keyring.gpg)"
  fi
  if [[ -n "$want" ]] && { [[ ! -f "$SRC_LIST" ]] || [[ "$(cat "$SRC_LIST")" != "$want" ]]; }; then
    say "adding $SRC_LIST (trixie sources only, no trixie binaries)"
    printf '%s\n' "$want" >"$SRC_LIST"
    logged apt-get update
    updated=1
  fi
  if ((${#missing[@]})); then
    ((updated)) || logged apt-get update
    updated=1
    say "installing build dependencies: ${missing[*]}"
    logged apt-get install -y --no-install-recommends "${missing[@]}"
  fi
  [[ "$SOURCE" == apt ]] || return 0
  if ! apt-cache showsrc python3.13 2>/dev/null | grep -q '^Package: python3.13$'; then
    ((updated)) || logged apt-get update
    apt-cache showsrc python3.13 2>/dev/null | grep -q '^Package: python3.13$' ||
      die "source package python3.13 not found after apt-get update (is $SRC_LIST reachable?)"
  fi
}

# Debian's patch series has two kinds of patches: upstream fixes (CVEs, crash fixes backported from
# CPython) and Debian integration (dist-packages layout, multiarch, ensurepip disabled, ...). The
# integration patches break a free-threaded build outside /usr: Debian's site.py looks for a venv's
# packages in lib/python3.13/site-packages while venv and pip use lib/python3.13t/site-packages, so
# nothing installed in a venv can be imported. Apply the upstream fixes only, in series order; any
# patch that does not apply cleanly stops the build. Prints the names of the applied patches.
apply_upstream_fixes() {
  local srcdir="$1" p applied=()
  while read -r p; do
    [[ "$p" =~ ^(CVE-[0-9]+-[0-9]+(-[0-9]+)?\.patch|ssl-[a-z-]+\.patch|dict-use-after-free\.patch|traverse-managed-dicts\.patch|gchead-alignment\.diff|issue[0-9]+\.diff|revert-logger-disable\.diff)$ ]] ||
      continue
    (cd "$srcdir" && logged patch -p1 --forward --batch --no-backup-if-mismatch -i "debian/patches/$p")
    applied+=("$p")
  done < <(grep -v -E '^[[:space:]]*(#|$)' "$srcdir/debian/patches/series")
  printf '%s\n' "${applied[@]}"
}

# Trixie's python3.13 source package, unpacked into $1 with Debian's upstream fixes only.
# Prints the stamp's description of the source.
fetch_apt_source() {
  local srcdir="$1" dsc srcver fixes
  say "fetching the python3.13 source package (trixie)"
  (cd "$WORK/src" && logged apt-get source --download-only python3.13)
  dsc="$(find "$WORK/src" -maxdepth 1 -name 'python3.13_*.dsc' | head -n 1)"
  [[ -n "$dsc" ]] || die "apt-get source produced no python3.13_*.dsc (see $LOG)"
  # Pristine upstream sources plus only Debian's upstream fixes (see apply_upstream_fixes).
  logged dpkg-source -x --skip-patches "$dsc" "$srcdir"
  srcver="$(cd "$srcdir" && dpkg-parsechangelog -S Version)"
  fixes="$(apply_upstream_fixes "$srcdir")"
  printf 'source: Debian python3.13 %s (trixie), upstream tree + these Debian patches:\n' "$srcver"
  printf '%s\n' "$fixes" | sed 's/^/  /'
}

# True when $TARBALLS/$1 exists and has the sha256 $2.
sha256_ok() { [[ -f "$TARBALLS/$1" ]] && [[ "$(sha256sum <"$TARBALLS/$1" | cut -d' ' -f1)" == "$2" ]]; }

# Downloads $1 from the pool into $TARBALLS unless a copy with the sha256 $2 is there; stops if the
# download does not have it either.
fetch_checked() {
  local name="$1" sum="$2"
  sha256_ok "$name" "$sum" && return
  mkdir -p "$TARBALLS"
  say "downloading $POOL/python$MINOR/$name"
  logged curl -fsSL --retry 3 -o "$TARBALLS/$name.part" "$POOL/python$MINOR/$name"
  mv "$TARBALLS/$name.part" "$TARBALLS/$name"
  sha256_ok "$name" "$sum" || die "$TARBALLS/$name: sha256 is not $sum"
}

# The upstream release tarball from Debian's pool, checked against the pinned .dsc, unpacked into $1
# with no patch. (Debian's 3.14 series holds no CVE fix: its upstream changes are one branch
# snapshot and ports to OpenSSL 4, which bookworm does not have.) Prints the stamp's description.
fetch_pool_source() {
  local srcdir="$1" sum
  fetch_checked "$DSC" "$DSC_SHA256"
  # The .dsc's Checksums-Sha256 section: " <sha256> <size> <file>" lines.
  sum="$(awk -v f="$ORIG" '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 }
    on && $3 == f { print $1 }' "$TARBALLS/$DSC")"
  [[ "$sum" =~ ^[0-9a-f]{64}$ ]] || die "$DSC gives no sha256 for $ORIG"
  fetch_checked "$ORIG" "$sum"
  mkdir -p "$srcdir"
  logged tar -xJf "$TARBALLS/$ORIG" -C "$srcdir" --strip-components=1
  printf 'source: %s (sha256 %s, from %s), no patches\n' "$ORIG" "$sum" "$DSC"
}

cmd_interpreter() {
  if interpreter_ok; then
    printf '%s\n' "$PY"
    return
  fi
  [[ "$(id -u)" == 0 ]] || die "building the interpreter needs root (apt-get, /etc/apt, $PREFIX)"
  rm -rf "$WORK"
  mkdir -p "$WORK/src"
  : >"$LOG"
  say "building CPython $VERSION into $PREFIX (log: $LOG)"
  local t0=$SECONDS
  apt_setup
  local srcdir="$WORK/src/python$MINOR" origin
  if [[ "$SOURCE" == apt ]]; then
    origin="$(fetch_apt_source "$srcdir")"
  else
    origin="$(fetch_pool_source "$srcdir")"
  fi
  say "configuring: $(head -n 1 <<<"$origin")"
  # --with-ensurepip=no: the base interpreter stays without pip; venvs get theirs from ensurepip.
  # --disable-test-modules: CPython's own test suite is neither built nor installed (140 MB, minutes).
  local configure_args=(--prefix="$PREFIX" --with-ensurepip=no --disable-test-modules)
  if ((FREE_THREADED)); then configure_args=(--disable-gil "${configure_args[@]}"); fi
  (cd "$srcdir" && logged ./configure "${configure_args[@]}")
  # nice: the machine is shared, and this is the heaviest build the project runs.
  say "compiling with $(nproc) jobs"
  (cd "$srcdir" && logged nice -n 10 make -j"$(nproc)")
  # A clean prefix: nothing of an earlier (failed or differently patched) install survives.
  [[ "$PREFIX" == /?*/?* ]] || die "refusing to clear PREFIX=$PREFIX"
  rm -rf "$PREFIX"
  (cd "$srcdir" && logged make install)
  {
    printf '%s\n' "$origin"
    printf 'configure %s\n' "${configure_args[*]}"
  } >"$STAMP"
  interpreter_ok || die "$PY was installed but is not a working $VERSION build (see $LOG)"
  say "built in $((SECONDS - t0)) s; removing $WORK/src"
  rm -rf "$WORK/src"
  printf '%s\n' "$PY"
}

# True when DIR is a venv on $PY holding versions that satisfy all of PINS.
venv_ok() {
  local dir="$1"
  [[ -x "$dir/bin/python" ]] || return 1
  env -u PYTHON_GIL "$dir/bin/python" -I - "$PY" "${PINS[@]}" <<'EOF' >/dev/null 2>&1
import os, sys
from importlib.metadata import version
from pip._vendor.packaging.requirements import Requirement
assert sys.prefix != sys.base_prefix
assert os.path.realpath(sys._base_executable) == os.path.realpath(sys.argv[1])
for spec in sys.argv[2:]:
    req = Requirement(spec)
    assert req.specifier.contains(version(req.name), prereleases=True), spec
EOF
}

cmd_venv() {
  local dir="${1:-$DEFAULT_VENV}"
  cmd_interpreter >/dev/null
  if ! venv_ok "$dir"; then
    mkdir -p "$WORK"
    [[ -f "$LOG" ]] || : >"$LOG"
    if [[ -x "$dir/bin/python" ]] && ! env -u PYTHON_GIL "$dir/bin/python" -c \
      'import os,sys; sys.exit(os.path.realpath(sys._base_executable) != os.path.realpath(sys.argv[1]))' \
      "$PY" 2>/dev/null; then
      say "$dir is a venv on another interpreter; recreating it"
      rm -rf "$dir"
    fi
    if [[ ! -x "$dir/bin/python" ]]; then
      say "creating venv $dir"
      logged "$PY" -m venv "$dir"
    fi
    say "installing ${PINS[*]} into $dir"
    logged env -u PYTHON_GIL "$dir/bin/python" -m pip install --disable-pip-version-check -q \
      --only-binary=:all: "${PINS[@]}"
    venv_ok "$dir" || die "$dir does not satisfy ${PINS[*]} after pip install (see $LOG)"
  fi
  printf '%s\n' "$dir"
}

cmd_test() {
  local venv
  venv="$(cmd_venv "${DLRS_PYFT_VENV:-$DEFAULT_VENV}")"
  cd "$REPO_ROOT"
  [[ -f pyproject.toml ]] || die "no pyproject.toml in $REPO_ROOT: nothing to build"
  # A debug build in the workspace's own target dir: it reuses everything `cargo test` compiled
  # (only PyO3 and the bindings are rebuilt for this interpreter). Set DLRS_PYFT_RELEASE=1 for
  # a release build (benchmarks).
  # The profile is always named: pyproject.toml's own (`wheel`) spends minutes on LTO.
  local profile=dev
  [[ "${DLRS_PYFT_RELEASE:-0}" == 1 ]] && profile=release
  say "maturin develop --profile $profile"
  # PYTHON_GIL is removed on purpose: the module itself must keep the GIL off.
  env -u PYTHON_GIL -u CONDA_PREFIX VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
    "$venv/bin/maturin" develop --quiet --profile "$profile"
  if ((FREE_THREADED)); then
    # The suite's own check (tests/test_threads_stress.py) skips on a GIL build; this one fails.
    env -u PYTHON_GIL "$venv/bin/python" -c 'import sys, dataloader_rs
assert sys._is_gil_enabled() is False, "the GIL is on after importing dataloader_rs"' ||
      die "$VERSION runs with the GIL on"
  fi
  # moto (the local S3 server) needs cryptography, which has no cp313t wheel and does not build
  # here, and the fake-gcs wheel has no cp313t build either: the emulators are processes of their
  # own, so on every interpreter here they run from the GIL venv ($DLRS_SERVICES_PYTHON, default <repo>/.venv, as
  # `cargo xtask py-test` makes it). Without one, tests of a missing service are skipped.
  local services="${DLRS_SERVICES_PYTHON:-$REPO_ROOT/.venv/bin/python}" allow=0
  [[ -x "$services" ]] || { say "no $services: tests of the S3 and GCS emulators are skipped"; allow=1; }
  env -u PYTHON_GIL DLRS_SERVICES_PYTHON="$services" DLRS_ALLOW_MISSING_SERVICES="$allow" \
    "$venv/bin/python" -m pytest tests "$@"
}

usage() {
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

case "${1:-}" in
  interpreter) shift; (($# == 0)) || usage; cmd_interpreter ;;
  venv) shift; (($# <= 1)) || usage; cmd_venv "$@" ;;
  test) shift; cmd_test "$@" ;;
  *) usage ;;
esac
