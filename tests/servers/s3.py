"""A local S3: moto's ``ThreadedMotoServer`` on 127.0.0.1, with boto3 helpers and client options.

moto refuses unsigned reads, so a client must be given (dummy) credentials: :meth:`S3TestServer.options`
and :meth:`S3TestServer.env` carry them.

Where moto is not installed (free-threaded 3.13t: no wheels for its dependencies), the server
runs in a child process of ``$DLRS_SERVICES_PYTHON`` (``python -m servers.s3``), which also does
the boto3 calls of the helpers, asked over its stdin.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import subprocess
import sys
import threading
from typing import Any

from ._common import ServiceUnavailable, missing_modules, services_python, tests_dir_env, unique_name
from .base import ObjectStoreServer

__all__ = ["MODULES", "S3TestServer", "s3_server"]

#: What moto's server and the helpers need (top-level names).
MODULES = ("moto", "boto3", "flask", "flask_cors", "werkzeug")


class S3TestServer(ObjectStoreServer):
    """moto's S3 on ``127.0.0.1`` at a free port.

    moto keeps its state per process: two servers in one process see the same buckets, so use
    :meth:`create_bucket` without a name (unique names) in tests.
    """

    scheme = "s3"
    region = "us-east-1"
    access_key_id = "testing"
    secret_access_key = "testing"

    def __init__(self) -> None:
        super().__init__()
        self._moto: Any = None
        self._client: Any = None
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._conns_lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None

    def _alive(self) -> bool:
        return self._moto is not None or (self._child is not None and self._child.poll() is None)

    def _launch(self, resources: contextlib.ExitStack) -> int:
        if missing_modules(MODULES, sys.executable) and not missing_modules(MODULES, services_python()):
            return self._launch_child(resources)
        try:
            import boto3  # noqa: F401
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise ServiceUnavailable(
                f"moto[server]/boto3 not installed ({exc}); run scripts/install-test-services.sh"
            ) from exc
        moto = ThreadedMotoServer(ip_address=self.host, port=0, verbose=False)
        moto.start()
        self._moto = moto
        resources.callback(self._stop_moto)
        self._track_connections(moto._server)
        return int(moto.get_host_and_port()[1])

    def _track_connections(self, wsgi_server: Any) -> None:
        # Keep-alive connections hold their handler thread until the client closes them; note
        # the sockets so that stop() can shut them down, and the handler threads so that it can
        # join them (werkzeug's are daemon threads, which server_close() does not join).
        process_request = wsgi_server.process_request
        conns, threads, lock = self._conns, self._threads, self._conns_lock
        process_request_thread = wsgi_server.process_request_thread

        def thread_tracked(request: socket.socket, client_address: Any) -> None:
            with lock:
                threads.add(threading.current_thread())
            try:
                process_request_thread(request, client_address)
            finally:
                with lock:
                    threads.discard(threading.current_thread())

        def tracked(request: socket.socket, client_address: Any) -> None:
            with lock:
                conns.add(request)
            process_request(request, client_address)

        shutdown_request = wsgi_server.shutdown_request

        def untracked(request: socket.socket) -> None:
            with lock:
                conns.discard(request)
            shutdown_request(request)

        wsgi_server.process_request = tracked
        wsgi_server.shutdown_request = untracked
        wsgi_server.process_request_thread = thread_tracked

    def _launch_child(self, resources: contextlib.ExitStack) -> int:
        cwd, env = tests_dir_env()
        child = subprocess.Popen(
            [services_python(), "-m", "servers.s3"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith("READY "):
            child.kill()
            child.communicate()
            raise RuntimeError(f"the S3 server process did not start (got {line!r})")
        self._child = child
        resources.callback(self._stop_child)
        return int(line.split()[1])

    def _ask(self, op: str, **args: str) -> Any:
        child = self._child
        assert child is not None
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(json.dumps({"op": op, **args}) + "\n")
        child.stdin.flush()
        answer = json.loads(child.stdout.readline() or '{"error": "the S3 server process exited"}')
        if "error" in answer:
            raise RuntimeError(f"S3 {op}: {answer['error']}")
        return answer.get("result")

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            child.communicate(timeout=15)  # closing stdin stops it
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()

    def _stop_moto(self) -> None:
        """Stops moto, shuts open connections down and joins every server thread."""
        moto, self._moto = self._moto, None
        if moto is None:
            return
        if self._client is not None:
            self._client.close()
            self._client = None
        wsgi_server = moto._server
        moto.stop()  # stops serve_forever and joins the serving thread
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        wsgi_server.server_close()  # closes the listening socket
        with self._conns_lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=10)

    # ----------------------------------------------------------------- client side

    def options(self) -> dict[str, str]:
        """object_store options (``AmazonS3ConfigKey`` names) for ``s3://<bucket>/...`` URLs."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_allow_http": "true",
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
            "aws_region": self.region,
        }

    def env(self) -> dict[str, str]:
        """The same settings as environment variables (as object_store's ``from_env`` reads them)."""
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }

    @property
    def client(self) -> Any:
        """A boto3 S3 client for this server (made once, closed by :meth:`stop`)."""
        if self._moto is None:
            raise RuntimeError("server not started")
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=self.access_key_id,
                aws_secret_access_key=self.secret_access_key,
                region_name=self.region,
                config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
            )
        return self._client

    def create_bucket(self, name: str | None = None) -> str:
        """Creates a bucket (a unique name if none is given) and returns its name."""
        name = name or unique_name("dlrs-s3")
        if self._child is not None:
            self._ask("create_bucket", name=name)
        else:
            self.client.create_bucket(Bucket=name)
        return name

    def put_object(self, bucket: str, key: str, body: bytes) -> None:
        if self._child is not None:
            self._ask("put_object", bucket=bucket, key=key, body=base64.b64encode(body).decode())
        else:
            self.client.put_object(Bucket=bucket, Key=key, Body=body)

    def delete_object(self, bucket: str, key: str) -> None:
        if self._child is not None:
            self._ask("delete_object", bucket=bucket, key=key)
        else:
            self.client.delete_object(Bucket=bucket, Key=key)

    def get_object(self, bucket: str, key: str) -> bytes:
        if self._child is not None:
            return base64.b64decode(self._ask("get_object", bucket=bucket, key=key))
        resp = self.client.get_object(Bucket=bucket, Key=key)
        with resp["Body"] as body:
            return bytes(body.read())


#: ``with s3_server() as server:`` starts an :class:`S3TestServer` and stops it.
s3_server = S3TestServer


def main() -> int:
    """``python -m servers.s3``: serves until stdin closes; prints ``READY <port>``, then answers
    each JSON request line (``create_bucket``, ``put_object``, ``delete_object``, ``get_object``) with a JSON line."""
    server = S3TestServer().start()
    print(f"READY {server.port}", flush=True)
    try:
        for line in sys.stdin:
            req = json.loads(line)
            try:
                op = req.pop("op")
                if op == "create_bucket":
                    result: Any = server.create_bucket(req["name"])
                elif op == "put_object":
                    server.put_object(req["bucket"], req["key"], base64.b64decode(req["body"]))
                    result = None
                elif op == "delete_object":
                    server.delete_object(req["bucket"], req["key"])
                    result = None
                elif op == "get_object":
                    result = base64.b64encode(server.get_object(req["bucket"], req["key"])).decode()
                else:
                    raise ValueError(f"unknown op {op!r}")
                answer = {"result": result}
            except Exception as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
