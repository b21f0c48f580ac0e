"""The life cycle all the test servers share: start once, wait until it answers, stop idempotently,
and release what a start took (process, log, thread, work directory) also when the start fails.

A server says only how it serves: :meth:`LocalServer._launch` starts it and returns its port,
registering on the given ``ExitStack`` whatever :meth:`LocalServer.stop` must undo. An emulator
that is a program of its own calls :meth:`LocalServer._run_program` from there.
"""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Self

from ._common import ManagedProcess, free_port, wait_for_http

__all__ = ["LocalServer", "ObjectStoreServer"]


class LocalServer:
    """A server on ``127.0.0.1``: :meth:`start`, :meth:`stop`, a context manager, :attr:`running`."""

    host = "127.0.0.1"
    #: For :meth:`_run_program`: what the process is called (log file, errors), the path that answers
    #: once it serves, and how long it may take to get there.
    name = "server"
    ready_path = "/"
    ready_timeout = 20.0

    def __init__(self) -> None:
        self.port = 0
        self._proc: ManagedProcess | None = None
        # None when stopped; else what stop() undoes, last taken first
        self._resources: contextlib.ExitStack | None = None

    def _launch(self, resources: contextlib.ExitStack) -> int:
        """Starts serving; returns the port. ``resources`` gets whatever :meth:`stop` must undo."""
        raise NotImplementedError

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def start(self) -> Self:
        """Starts the server and waits until it serves; returns ``self``."""
        if self._resources is not None:
            raise RuntimeError("server already started")
        resources = contextlib.ExitStack()
        try:
            self.port = self._launch(resources)
        except BaseException:
            resources.close()
            raise
        self._resources = resources
        return self

    def stop(self) -> None:
        """Stops the server and releases all it held (idempotent)."""
        resources, self._resources = self._resources, None
        if resources is not None:
            resources.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._resources is not None and self._alive()

    @property
    def pid(self) -> int | None:
        """The server's process, if it is a program of its own."""
        return None if self._proc is None else self._proc.pid

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``"""
        return f"http://{self.host}:{self.port}"

    def _run_program(
        self,
        resources: contextlib.ExitStack,
        argv: Callable[[int], Sequence[str]],
        cwd: str | None = None,
    ) -> int:
        """Runs ``argv(port)`` at a free port until it answers at :attr:`ready_path`; the port.

        The process's output goes to a log whose tail is in the error if it never answers.
        """
        last_error: Exception | None = None
        for _ in range(3):  # the free port can be taken between free_port() and the bind
            port = free_port()
            proc = ManagedProcess(argv(port), name=self.name, cwd=cwd)
            try:
                wait_for_http(
                    f"http://{self.host}:{port}{self.ready_path}",
                    timeout=self.ready_timeout,
                    process=proc.process,
                )
            except RuntimeError as exc:
                last_error = RuntimeError(f"{exc}\n{proc.log_tail()}")
                proc.stop()
                continue
            self._proc = proc
            resources.callback(self._end_process)
            return port
        raise RuntimeError(f"{self.name} did not start: {last_error}")

    def _end_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.stop()


class ObjectStoreServer(LocalServer):
    """An object-store emulator: the bucket helpers the tests use for S3, GCS and Azure alike."""

    #: URL scheme of its objects (``s3``, ``gs``, ``az``).
    scheme = ""

    def url(self, bucket: str, key: str = "") -> str:
        """``<scheme>://<bucket>/<key>``"""
        return f"{self.scheme}://{bucket}/{key}"

    def create_bucket(self, name: str | None = None) -> str:
        """Creates a bucket (a unique name if none is given) and returns its name."""
        raise NotImplementedError

    # positional-only: Azure's names for them are put_blob/get_blob(container, ...)
    def put_object(self, bucket: str, key: str, body: bytes, /) -> None:
        raise NotImplementedError

    def get_object(self, bucket: str, key: str, /) -> bytes:
        raise NotImplementedError

    def put_objects(self, bucket: str, objects: Mapping[str, bytes]) -> None:
        for key, body in objects.items():
            self.put_object(bucket, key, body)

    def options(self) -> dict[str, str]:
        """object_store options that reach this server."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        """The same settings as environment variables."""
        raise NotImplementedError

    def _send(self, req: urllib.request.Request, path: str) -> bytes:
        """The body of the answer to ``req``; an error status raises RuntimeError with its start."""
        if self._resources is None:
            raise RuntimeError("server not started")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            exc.close()
            raise RuntimeError(f"{req.get_method()} {path}: HTTP {exc.code}: {detail}") from None
