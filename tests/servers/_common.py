"""Shared helpers of the test servers: free ports, unique names, readiness polling, subprocesses."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "ALLOW_MISSING_ENV",
    "METADATA_BLACKHOLE",
    "SERVICES_PYTHON_ENV",
    "ManagedProcess",
    "ServiceUnavailable",
    "cloud_isolation_env",
    "free_port",
    "missing_modules",
    "missing_services_allowed",
    "services_python",
    "tests_dir_env",
    "unique_name",
    "wait_for_http",
]

#: Set to ``1`` to let tests skip (instead of fail) when a service is not installed.
ALLOW_MISSING_ENV = "DLRS_ALLOW_MISSING_SERVICES"

_names = itertools.count()

#: A closed port on the loopback: where a client without credentials is sent to look for cloud
#: instance metadata, instead of 169.254.169.254 (object_store falls back to it when no
#: credentials are given, and that address must never be contacted from the tests).
METADATA_BLACKHOLE = "http://127.0.0.1:9"

_CLOUD_PREFIXES = ("AWS_", "GOOGLE_", "AZURE_", "AZURITE_", "GCE_")
_CLOUD_NAMES = (
    "STORAGE_EMULATOR_HOST",
    "IDENTITY_ENDPOINT",
    "MSI_ENDPOINT",
    "IMDS_ENDPOINT",
)


def cloud_isolation_env(
    environ: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """What to remove from and set in the environment so that no cloud client reaches past the
    loopback: (names to remove, variables to set).

    Removes every ``AWS_*``, ``GOOGLE_*``, ``AZURE_*``, ``AZURITE_*``, ``GCE_*`` variable (and a
    few others), then points the instance-metadata endpoints of the three clouds at
    :data:`METADATA_BLACKHOLE`: ``AWS_METADATA_ENDPOINT`` (object_store key
    ``aws_metadata_endpoint``), ``GCE_METADATA_HOST``/``GCE_METADATA_IP`` (read by object_store
    itself) and ``AZURE_MSI_ENDPOINT`` (``azure_msi_endpoint``).
    """
    env = os.environ if environ is None else environ
    remove = [k for k in env if k.startswith(_CLOUD_PREFIXES) or k in _CLOUD_NAMES]
    host = METADATA_BLACKHOLE.removeprefix("http://")
    return remove, {
        "AWS_METADATA_ENDPOINT": METADATA_BLACKHOLE,
        "GCE_METADATA_HOST": host,
        "GCE_METADATA_IP": host,
        "AZURE_MSI_ENDPOINT": METADATA_BLACKHOLE + "/metadata/identity/oauth2/token",
    }


#: The interpreter that runs the Python-based emulators (moto, the fake-gcs wheel's binary):
#: they are processes of their own, so on free-threaded 3.13t, for which they have no wheels,
#: they run from the GIL venv (scripts/python-ft.sh sets it). Default: this interpreter.
SERVICES_PYTHON_ENV = "DLRS_SERVICES_PYTHON"


def services_python() -> str:
    """``$DLRS_SERVICES_PYTHON``, else this interpreter."""
    return os.environ.get(SERVICES_PYTHON_ENV) or sys.executable


@functools.cache
def missing_modules(modules: tuple[str, ...], python: str) -> tuple[str, ...]:
    """The top-level ``modules`` that ``python`` cannot import (found, not imported)."""
    if python == sys.executable:
        return tuple(m for m in modules if importlib.util.find_spec(m) is None)
    code = "import importlib.util, sys; print(*(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    try:
        out = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return tuple(f"{m} ({python}: {exc})" for m in modules)
    return tuple(out.stdout.split())


def tests_dir_env() -> tuple[str, dict[str, str]]:
    """The tests directory and an environment in which ``python -m servers.<name>`` runs there."""
    tests_dir = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = tests_dir + os.pathsep + env.get("PYTHONPATH", "")
    return tests_dir, env


class ServiceUnavailable(RuntimeError):
    """A service's software is not installed (see ``scripts/install-test-services.sh``)."""


def missing_services_allowed() -> bool:
    """Whether ``DLRS_ALLOW_MISSING_SERVICES=1`` is set."""
    return os.environ.get(ALLOW_MISSING_ENV, "") == "1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for servers that cannot bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique_name(prefix: str = "dlrs") -> str:
    """A bucket/container name unique in this run: lower-case letters, digits and dashes."""
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:8]}"


def wait_for_http(url: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Polls ``url`` until any HTTP answer comes (an error status counts as up).

    Raises RuntimeError if ``process`` exits first or nothing answers within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with status {process.returncode} before serving {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                resp.read()
            return
        except urllib.error.HTTPError as exc:
            exc.close()
            return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing answered at {url} within {timeout} s")
        time.sleep(0.05)


class ManagedProcess:
    """A server subprocess whose output goes to a log file; :meth:`stop` ends and reaps it.

    With ``stdin=True`` its input is a pipe, and :meth:`stop` first closes it (a server that
    stops at the end of its input gets to end by itself).
    """

    def __init__(self, argv: Sequence[str], name: str, cwd: str | None = None, *, stdin: bool = False) -> None:
        self.argv = list(argv)
        self.name = name
        # closed by stop(): the file outlives this method
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix=f"dlrs-{name}-", suffix=".log", delete=False
        )
        self.log_path = Path(self._log.name)
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def first_lines(self, n: int, timeout: float) -> list[str]:
        """The first ``n`` lines of the output, once written; RuntimeError (with the log's tail)
        if the process exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.log_path.read_text(errors="replace").splitlines(keepends=True)[:n]
            if len(lines) == n and lines[-1].endswith("\n"):
                return [line.rstrip("\n") for line in lines]
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} printed no {n} lines\n{self.log_tail()}")
            time.sleep(0.005)

    def stop(self, timeout: float = 10.0) -> None:
        """Closes the input, if a pipe, and waits ``timeout`` seconds for the exit; then SIGTERM,
        then SIGKILL after ``timeout`` seconds; waits for the exit (idempotent)."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        self._log.close()
        self.log_path.unlink(missing_ok=True)
