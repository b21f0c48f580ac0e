"""A local Azure Blob service: Azurite (from npm) as a subprocess on 127.0.0.1, blob service only,
in memory, with SharedKey-signed helpers over plain urllib and client options.

Azurite is looked up in ``$DLRS_AZURITE_BIN`` (the ``azurite-blob`` script), then under
``$DLRS_AZURITE_DIR`` (default ``/opt/dlrs/azurite``, where ``scripts/install-test-services.sh``
puts it), then ``tests/servers/node_modules``, then ``PATH``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from email.utils import formatdate
from pathlib import Path
from typing import Self

from ._common import (
    ManagedProcess,
    ServiceUnavailable,
    free_port,
    unique_name,
    wait_for_http,
)

__all__ = [
    "ACCOUNT",
    "ACCOUNT_KEY",
    "AzuriteServer",
    "azurite_binary",
    "azurite_server",
]

#: Azurite's well-known development account and key.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

_API_VERSION = "2021-08-06"
_DEFAULT_DIR = "/opt/dlrs/azurite"


def azurite_binary() -> Path:
    """The ``azurite-blob`` executable (see the module's docstring for where it is looked up)."""
    candidates: list[Path] = []
    if os.environ.get("DLRS_AZURITE_BIN"):
        candidates.append(Path(os.environ["DLRS_AZURITE_BIN"]))
    base = Path(os.environ.get("DLRS_AZURITE_DIR") or _DEFAULT_DIR)
    candidates.append(base / "node_modules" / ".bin" / "azurite-blob")
    candidates.append(Path(__file__).parent / "node_modules" / ".bin" / "azurite-blob")
    on_path = shutil.which("azurite-blob")
    if on_path:
        candidates.append(Path(on_path))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ServiceUnavailable(
        "azurite-blob not found (looked in: "
        + ", ".join(str(p) for p in candidates)
        + "); run scripts/install-test-services.sh"
    )


def _sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    key: str = ACCOUNT_KEY,
    account: str = ACCOUNT,
) -> str:
    """The ``Authorization: SharedKey`` value for a request (Blob service, version 2009-09-19+)."""
    parts = urllib.parse.urlsplit(url)
    h = {k.lower(): v for k, v in headers.items()}
    length = h.get("content-length", "")
    if length == "0":
        length = ""
    canonical_headers = "".join(f"{k}:{h[k].strip()}\n" for k in sorted(h) if k.startswith("x-ms-"))
    resource = f"/{account}{parts.path}"
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    for name in sorted(query, key=str.lower):
        resource += f"\n{name.lower()}:{','.join(sorted(query[name]))}"
    string_to_sign = (
        "\n".join(
            [
                method,
                h.get("content-encoding", ""),
                h.get("content-language", ""),
                length,
                h.get("content-md5", ""),
                h.get("content-type", ""),
                "",  # Date: x-ms-date is used instead
                h.get("if-modified-since", ""),
                h.get("if-match", ""),
                h.get("if-none-match", ""),
                h.get("if-unmodified-since", ""),
                h.get("range", ""),
            ]
        )
        + "\n"
        + canonical_headers
        + resource
    )
    digest = hmac.new(base64.b64decode(key), string_to_sign.encode("utf-8"), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(digest).decode()}"


class AzuriteServer:
    """Azurite's blob service on ``127.0.0.1`` at a free port (in memory, loose, no telemetry)."""

    account = ACCOUNT
    account_key = ACCOUNT_KEY

    def __init__(self) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: ManagedProcess | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    # ----------------------------------------------------------------- life cycle

    def start(self) -> Self:
        if self._proc is not None:
            raise RuntimeError("server already started")
        binary = azurite_binary()
        if shutil.which("node") is None:
            raise ServiceUnavailable("node is not installed (Azurite needs it)")
        self._workdir = tempfile.TemporaryDirectory(prefix="dlrs-azurite-")
        last_error: Exception | None = None
        for _ in range(3):  # the free port can be taken between free_port() and the bind
            port = free_port()
            proc = ManagedProcess(
                [
                    str(binary),
                    "--blobHost",
                    self.host,
                    "--blobPort",
                    str(port),
                    "--inMemoryPersistence",
                    "--skipApiVersionCheck",
                    "--loose",
                    "--disableTelemetry",
                    "--disableProductStyleUrl",
                    "--silent",
                ],
                name="azurite",
                cwd=self._workdir.name,
            )
            try:
                wait_for_http(
                    f"http://{self.host}:{port}/{ACCOUNT}?comp=list",
                    timeout=30,
                    process=proc.process,
                )
            except RuntimeError as exc:
                last_error = RuntimeError(f"{exc}\n{proc.log_tail()}")
                proc.stop()
                continue
            self._proc, self.port = proc, port
            return self
        self._workdir.cleanup()
        self._workdir = None
        raise RuntimeError(f"Azurite did not start: {last_error}")

    def stop(self) -> None:
        """Terminates Azurite and waits for it (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.stop()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.alive()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    # ----------------------------------------------------------------- client side

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>`` — the value of ``AZURITE_BLOB_STORAGE_URL``."""
        return f"http://{self.host}:{self.port}"

    @property
    def account_url(self) -> str:
        """``http://127.0.0.1:<port>/devstoreaccount1`` — the blob endpoint of the account."""
        return f"{self.endpoint}/{ACCOUNT}"

    def options(self) -> dict[str, str]:
        """object_store options (``AzureConfigKey`` names) for ``az://<container>/...`` URLs.

        With ``azure_storage_use_emulator`` object_store takes the emulator's address from the
        ``AZURITE_BLOB_STORAGE_URL`` environment variable only (see :meth:`env`); no option key
        carries it.
        """
        return {
            "azure_storage_use_emulator": "true",
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": ACCOUNT_KEY,
        }

    def endpoint_options(self) -> dict[str, str]:
        """object_store options that reach Azurite without the emulator mode and without any
        environment variable: the account's endpoint, plain HTTP, the well-known key."""
        return {
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": ACCOUNT_KEY,
            "azure_storage_endpoint": self.account_url,
            "azure_allow_http": "true",
        }

    def env(self) -> dict[str, str]:
        """Environment variables: ``AZURITE_BLOB_STORAGE_URL`` (needed with :meth:`options`) and the
        ``AZURE_STORAGE_*`` equivalents of the options."""
        return {
            "AZURITE_BLOB_STORAGE_URL": self.endpoint,
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
        }

    @staticmethod
    def url(container: str, key: str = "") -> str:
        """``az://<container>/<key>``"""
        return f"az://{container}/{key}"

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """A SharedKey-signed request to ``<account_url><path>`` (``path`` already percent-encoded)."""
        if self._proc is None:
            raise RuntimeError("server not started")
        url = self.account_url + path
        h = {
            "x-ms-date": formatdate(usegmt=True),
            "x-ms-version": _API_VERSION,
            "Content-Length": str(len(body)),
        }
        h.update(headers or {})
        if method in ("PUT", "POST") and not any(k.lower() == "content-type" for k in h):
            # urllib would add a form Content-Type, which then would not match the signature
            h["Content-Type"] = "application/octet-stream"
        h["Authorization"] = _sign(method, url, h)
        req = urllib.request.Request(
            url,
            data=body if method in ("PUT", "POST") else None,
            method=method,
            headers=h,
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            exc.close()
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {detail}") from None

    def create_container(self, name: str | None = None) -> str:
        """Creates a container (a unique name if none is given) and returns its name."""
        name = name or unique_name("dlrs-az")
        self.request("PUT", f"/{name}?restype=container")
        return name

    def put_blob(self, container: str, key: str, body: bytes) -> None:
        """Uploads ``body`` as the block blob ``az://<container>/<key>``."""
        self.request(
            "PUT",
            f"/{container}/{urllib.parse.quote(key)}",
            body,
            {"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream"},
        )

    def put_blobs(self, container: str, blobs: Mapping[str, bytes]) -> None:
        for key, body in blobs.items():
            self.put_blob(container, key, body)

    def get_blob(self, container: str, key: str) -> bytes:
        return self.request("GET", f"/{container}/{urllib.parse.quote(key)}")

    # Names shared with the S3 and GCS servers, so tests can be written once for all three.
    create_bucket = create_container
    put_object = put_blob
    put_objects = put_blobs
    get_object = get_blob


class azurite_server:
    """Context manager: ``with azurite_server() as server:`` starts an :class:`AzuriteServer` and stops it."""

    def __init__(self) -> None:
        self._server = AzuriteServer()

    def __enter__(self) -> AzuriteServer:
        return self._server.start()

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
