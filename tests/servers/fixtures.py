"""pytest fixtures and marks for the test servers; bring them into a conftest with
``from servers.fixtures import *  # noqa: F403``.

A service whose software is missing fails the test that needs it, unless
``DLRS_ALLOW_MISSING_SERVICES=1`` is set: then it is skipped (the ``requires_*`` marks skip at
collection time, without starting anything).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from ._common import (
    METADATA_BLACKHOLE,
    ServiceUnavailable,
    cloud_isolation_env,
    missing_modules,
    missing_services_allowed,
    services_python,
)
from .azure import AzuriteServer, azurite_binary
from .base import LocalServer, ObjectStoreServer
from .gcs import GcsTestServer, fake_gcs_binary
from .http import HttpTestServer
from .s3 import MODULES as S3_MODULES
from .s3 import S3TestServer

__all__ = [
    "METADATA_BLACKHOLE",
    "ObjectStoreCase",
    "azure_container",
    "azurite_server",
    "cloud_env_isolated",
    "gcs_bucket",
    "gcs_server",
    "http_server",
    "http_server_factory",
    "isolate_cloud_env",
    "missing_service",
    "object_store_case",
    "requires_azurite",
    "requires_gcs",
    "requires_s3",
    "s3_bucket",
    "s3_server",
    "start_or_skip",
]

_S = TypeVar("_S", bound=LocalServer)
AnyStoreServer = ObjectStoreServer


def missing_service(name: str) -> str | None:
    """Why the service ``name`` (``"s3"``, ``"gcs"``, ``"azure"``) cannot run here, or None.

    Checks only that its software is installed; starts nothing.
    """
    try:
        if name == "s3":
            # top-level names only: find_spec of a submodule would import moto (slow)
            if missing_modules(S3_MODULES, sys.executable):
                missing = missing_modules(S3_MODULES, services_python())
                if missing:
                    return f"{missing} missing in {services_python()} (pip install 'moto[server]' boto3)"
        elif name == "gcs":
            fake_gcs_binary()
        elif name == "azure":
            azurite_binary()
            if shutil.which("node") is None:
                return "node missing"
        else:
            raise ValueError(f"unknown service {name!r}")
    except ServiceUnavailable as exc:
        return str(exc)
    return None


def _requires(name: str) -> pytest.MarkDecorator:
    reason = missing_service(name)
    return pytest.mark.skipif(
        reason is not None and missing_services_allowed(),
        reason=f"{name} unavailable and DLRS_ALLOW_MISSING_SERVICES=1: {reason}",
    )


#: Skip marks: they skip only when the service is missing AND DLRS_ALLOW_MISSING_SERVICES=1.
requires_s3 = _requires("s3")
requires_gcs = _requires("gcs")
requires_azurite = _requires("azure")


def start_or_skip(server: _S) -> _S:
    """Starts ``server``; a missing install skips the test under DLRS_ALLOW_MISSING_SERVICES=1
    and fails it otherwise."""
    try:
        return server.start()
    except ServiceUnavailable as exc:
        if missing_services_allowed():
            pytest.skip(f"service unavailable: {exc}")
        pytest.fail(
            f"service unavailable: {exc} (set DLRS_ALLOW_MISSING_SERVICES=1 to skip)",
            pytrace=False,
        )


def isolate_cloud_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Removes the cloud variables of this process's environment and sends the instance-metadata
    look-ups of a credential-less client to a closed loopback port (see
    :func:`servers._common.cloud_isolation_env`); undone when the test ends."""
    remove, set_ = cloud_isolation_env()
    for name in remove:
        monkeypatch.delenv(name, raising=False)
    for name, value in set_.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def cloud_env_isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`isolate_cloud_env` for this test. The bucket fixtures below use it: a client built
    without credentials then fails on 127.0.0.1:9 instead of asking 169.254.169.254."""
    isolate_cloud_env(monkeypatch)


def _served(server: _S) -> Iterator[_S]:
    """The body of a server fixture: ``server`` started (:func:`start_or_skip`), stopped after."""
    start_or_skip(server)
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- HTTP


@pytest.fixture
def http_server() -> Iterator[HttpTestServer]:
    """A fresh :class:`HttpTestServer` for this test, stopped (threads joined) afterwards."""
    yield from _served(HttpTestServer())


@pytest.fixture
def http_server_factory() -> Iterator[Callable[..., HttpTestServer]]:
    """``make(**defaults)`` starts an :class:`HttpTestServer` (e.g. ``make(delay=0.01)``); every
    server made is stopped after the test."""
    with contextlib.ExitStack() as servers:

        def make(**kwargs: Any) -> HttpTestServer:
            return servers.enter_context(HttpTestServer(**kwargs))

        yield make


# --------------------------------------------------------------------------- object stores


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3TestServer]:
    """moto's S3 server, one per test session (use :func:`s3_bucket` for a fresh bucket)."""
    yield from _served(S3TestServer())


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsTestServer]:
    """fake-gcs-server, one per test session (use :func:`gcs_bucket` for a fresh bucket)."""
    yield from _served(GcsTestServer())


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """Azurite's blob service, one per test session (use :func:`azure_container`)."""
    yield from _served(AzuriteServer())


@pytest.fixture
def s3_bucket(s3_server: S3TestServer, cloud_env_isolated: None) -> str:
    """A new, empty bucket on :func:`s3_server`."""
    return s3_server.create_bucket()


@pytest.fixture
def gcs_bucket(gcs_server: GcsTestServer, cloud_env_isolated: None) -> str:
    """A new, empty bucket on :func:`gcs_server`."""
    return gcs_server.create_bucket()


@pytest.fixture
def azure_container(
    azurite_server: AzuriteServer,
    cloud_env_isolated: None,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """A new, empty container on :func:`azurite_server`; also sets ``AZURITE_BLOB_STORAGE_URL``
    for this test (object_store's emulator mode reads the address from it)."""
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite_server.endpoint)
    return azurite_server.create_container()


@dataclass
class ObjectStoreCase:
    """One object store with a fresh bucket, for tests written once for S3, GCS and Azure."""

    #: ``"s3"``, ``"gcs"`` or ``"azure"``.
    name: str
    #: URL scheme: ``"s3"``, ``"gs"`` or ``"az"``.
    scheme: str
    server: AnyStoreServer
    bucket: str
    #: object_store options that reach the emulator (with the environment this fixture set).
    options: dict[str, str] = field(default_factory=dict)
    #: The same configuration as environment variables, for tests of credentials from the env.
    env: dict[str, str] = field(default_factory=dict)

    def url(self, key: str = "") -> str:
        """``<scheme>://<bucket>/<key>``"""
        return f"{self.scheme}://{self.bucket}/{key}"

    def put(self, key: str, body: bytes) -> None:
        self.server.put_object(self.bucket, key, body)

    def put_many(self, objects: Mapping[str, bytes]) -> None:
        self.server.put_objects(self.bucket, objects)

    def get(self, key: str) -> bytes:
        return bytes(self.server.get_object(self.bucket, key))


_SCHEMES = {"s3": "s3", "gcs": "gs", "azure": "az"}
_SERVER_FIXTURES = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite_server"}


@pytest.fixture(
    params=[
        pytest.param("s3", marks=requires_s3),
        pytest.param("gcs", marks=requires_gcs),
        pytest.param("azure", marks=requires_azurite),
    ]
)
def object_store_case(
    request: pytest.FixtureRequest,
    cloud_env_isolated: None,
    monkeypatch: pytest.MonkeyPatch,
) -> ObjectStoreCase:
    """Parametrized over S3, GCS and Azure: a fresh bucket and the options that reach it, in an
    isolated cloud environment (:func:`cloud_env_isolated`).

    For Azure, ``AZURITE_BLOB_STORAGE_URL`` is set for the test (the only setting object_store
    takes from the environment only).
    """
    name: str = request.param
    server: AnyStoreServer = request.getfixturevalue(_SERVER_FIXTURES[name])
    if isinstance(server, AzuriteServer):
        monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", server.endpoint)
    bucket = server.create_bucket()
    return ObjectStoreCase(
        name=name,
        scheme=_SCHEMES[name],
        server=server,
        bucket=bucket,
        options=server.options(),
        env=server.env(),
    )
