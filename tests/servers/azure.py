"""A local Azure Blob service: Azurite (from npm) as a subprocess on 127.0.0.1, blob service only,
in memory, with SharedKey-signed helpers over plain urllib and client options.

Azurite is looked up in ``$DLRS_AZURITE_BIN`` (the ``azurite-blob`` script), then under
``$DLRS_AZURITE_DIR`` (default ``/opt/dlrs/azurite``, where ``scripts/install-test-services.sh``
puts it), then ``tests/servers/node_modules``, then ``PATH``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Mapping
from email.utils import formatdate
from pathlib import Path

from ._common import ServiceUnavailable, unique_name
from .base import ObjectStoreServer

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


class AzuriteServer(ObjectStoreServer):
    """Azurite's blob service on ``127.0.0.1`` at a free port (in memory, loose, no telemetry).

    Its :attr:`endpoint` is the value of ``AZURITE_BLOB_STORAGE_URL``.
    """

    name = "Azurite"
    scheme = "az"
    ready_path = f"/{ACCOUNT}?comp=list"
    ready_timeout = 30.0
    account = ACCOUNT
    account_key = ACCOUNT_KEY

    def _launch(self, resources: contextlib.ExitStack) -> int:
        binary = str(azurite_binary())
        if shutil.which("node") is None:
            raise ServiceUnavailable("node is not installed (Azurite needs it)")
        workdir = resources.enter_context(tempfile.TemporaryDirectory(prefix="dlrs-azurite-"))
        return self._run_program(
            resources,
            lambda port: [
                binary,
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
            cwd=workdir,
        )

    # ----------------------------------------------------------------- client side

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

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """A SharedKey-signed request to ``<account_url><path>`` (``path`` already percent-encoded)."""
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
        return self._send(req, path)

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

    def get_blob(self, container: str, key: str) -> bytes:
        return self.request("GET", f"/{container}/{urllib.parse.quote(key)}")

    # Names shared with the S3 and GCS servers, so tests can be written once for all three.
    create_bucket = create_container
    put_object = put_blob
    get_object = get_blob
    put_blobs = ObjectStoreServer.put_objects


#: ``with azurite_server() as server:`` starts an :class:`AzuriteServer` and stops it.
azurite_server = AzuriteServer
