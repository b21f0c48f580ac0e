"""The ``dlrs`` command: through the installed console script (a subprocess) and ``cli_main``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dataloader_rs
from dataloader_rs import HttpDataset, PyDataloader, _native

from conftest import kill_at_end
from servers.fixtures import ObjectStoreCase
from servers.http import HttpTestServer, item_body

SCRIPT = Path(sys.executable).parent / "dlrs"


def dlrs(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs the console script (or ``python -m dataloader_rs._cli`` where it is not installed)."""
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dataloader_rs._cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout, check=False)


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.timeout(60)
def test_prefetch_resumes_after_a_partial_run(http_server: HttpTestServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Items 3, 8 and 11 answer 503 to their first request: with no retries, the first run misses them.
    fail = ["1" if i in (3, 8, 11) else "0" for i in range(12)]
    template = http_server.base_url + "/item/{index}?fail={f}&key=k{index}&token=secret"
    args = ["prefetch", template, "-c", "f=" + ",".join(fail), "--retries", "0", "--out", str(out)]

    first = dlrs(*args)
    assert first.returncode == 1, first.stderr
    assert "prefetch: 12 items in" in first.stdout
    assert "9 fetched" in first.stdout
    assert "3 failed" in first.stdout
    assert "3 items failed (index, location, error):" in first.stderr
    for i in (3, 8, 11):
        assert f"\n  {i}\t{http_server.base_url}/item/{i}\tHTTP status 503" in first.stderr
    assert "secret" not in first.stderr
    assert files(out) == [f"{i:02}" for i in range(12) if i not in (3, 8, 11)]

    # An interrupted write leaves a .part file: it is fetched again, not taken as complete.
    (out / "07").unlink()
    (out / "07.part").write_bytes(b"ite")
    before = len(http_server.requests)  # (reset() would forget the fail= counters)
    second = dlrs(*args)
    assert second.returncode == 0, second.stderr
    assert "4 fetched" in second.stdout
    assert "8 already complete" in second.stdout
    assert sorted(r.path for r in http_server.requests[before:]) == sorted(f"/item/{i}" for i in (3, 7, 8, 11))
    assert files(out) == [f"{i:02}" for i in range(12)]
    for i in range(12):
        assert (out / f"{i:02}").read_bytes() == item_body(i)


@pytest.mark.timeout(60)
def test_prefetch_lists_a_failing_item_and_exits_non_zero(http_server: HttpTestServer, tmp_path: Path) -> None:
    template = http_server.base_url + "/{kind}/{n}"
    result = dlrs(
        "prefetch", template, "-c", "kind=item,status,item", "-c", "n=0,404,2",
        "--name", "{kind}-{n}.bin", "--concurrency", "2", "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1
    assert f"1 item failed (index, location, error):\n  1\t{http_server.base_url}/status/404\tHTTP status 404" in (
        result.stderr
    )
    assert files(tmp_path) == ["item-0.bin", "item-2.bin"]
    assert (tmp_path / "item-2.bin").read_bytes() == item_body(2)


def test_argument_errors_exit_with_2(tmp_path: Path) -> None:
    missing = dlrs("prefetch", "http://127.0.0.1:9/{index}")
    assert missing.returncode == 2
    assert "the following required arguments were not provided" in missing.stderr
    assert "--out <DIR>" in missing.stderr
    unused = dlrs("prefetch", "http://127.0.0.1:9/{index}", "-c", "x=1,2", "--out", str(tmp_path))
    assert unused.returncode == 2
    assert "error: column 'x' is not used by the template" in unused.stderr
    scheme = dlrs("prefetch", "ftp://h/{index}", "--length", "1", "--out", str(tmp_path))
    assert (scheme.returncode, scheme.stderr.strip()) == (
        2,
        "error: unsupported scheme ftp:// (use http, https, s3, gs, az or a file path)",
    )


def interpreter(gil_forced_on: bool) -> str:
    """How ``dlrs --version`` names this interpreter (with ``PYTHON_GIL=1`` when ``gil_forced_on``)."""
    name = f"{platform.python_implementation()} {platform.python_version()}"
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return name
    return name + (", free-threaded build, GIL enabled" if gil_forced_on else ", free-threaded")


@pytest.mark.parametrize("gil", [None, "1"])
def test_version_is_the_packages_and_names_the_interpreter(gil: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    if gil is not None:
        env["PYTHON_GIL"] = gil
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dataloader_rs._cli"]
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    package = importlib.metadata.version("dataloader-rs")
    assert package == dataloader_rs.__version__
    assert result.stdout == f"dlrs {package} ({interpreter(gil is not None)})\n"


def test_importing_the_package_leaves_asyncio_to_the_async_loaders() -> None:
    # Every `dlrs` run imports the package first; asyncio was half of that import's time.
    code = (
        "import sys, dataloader_rs\n"
        "before = 'asyncio' in sys.modules\n"
        "class A(dataloader_rs.PyAsyncDataset):\n"
        "    def __len__(self): return 2\n"
        "    async def __getitem__(self, i): return i\n"
        "print(before, list(dataloader_rs.PyDataloader(A(), batch_size=2)), 'asyncio' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "False [[0, 1]] True\n"


def test_cli_main_returns_the_status(capfd: pytest.CaptureFixture[str]) -> None:
    assert _native.cli_main(["dlrs", "--version"]) == 0
    gil_on = bool(sysconfig.get_config_var("Py_GIL_DISABLED")) and getattr(sys, "_is_gil_enabled", bool)()
    assert capfd.readouterr().out == f"dlrs {dataloader_rs.__version__} ({interpreter(gil_on)})\n"
    assert _native.cli_main(["dlrs", "bench", "--workers", "x"]) == 2
    assert "invalid value 'x' for '--workers <WORKERS>'" in capfd.readouterr().err
    assert _native.cli_main(["dlrs", "prefetch", "--help"]) == 0
    assert "Examples:" in capfd.readouterr().out


def test_bench_json() -> None:
    result = dlrs("bench", "overhead", "http", "--items", "256", "--latency-ms", "1", "--item-bytes", "100", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["workload"] for r in rows] == ["overhead", "http"]
    assert rows[0]["items"] == 256
    assert rows[0]["bytes"] == 0
    assert rows[1]["bytes"] == 256 * 100
    assert rows[1]["concurrency"] == 32
    assert all(r["items_per_second"] > 0 for r in rows)


def serve_command() -> list[str]:
    return [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dataloader_rs._cli"]


@pytest.mark.timeout(60)
def test_serve_answers_until_stdin_closes() -> None:
    proc = subprocess.Popen(
        [*serve_command(), "serve", "--latency-ms", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        base = proc.stdout.readline().strip()
        assert base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base}/bytes/1000?i=7", timeout=10) as response:
            body = response.read()
        assert body == bytes((j * 31 + 7) % 256 for j in range(1000))
        urls = [f"{base}/bytes/100?i={i}" for i in range(40)]
        batches = list(PyDataloader(HttpDataset(urls), batch_size=8, num_workers=2, item_concurrency=4))
        assert [len(b) for b in batches] == [8] * 5
        assert all(item == body[:100] for batch in batches for item in batch)
        assert proc.poll() is None
        out, err = proc.communicate(timeout=30)  # closing stdin stops the server
    finally:
        kill_at_end(proc)
    assert proc.returncode == 0
    assert out == ""
    assert err.startswith("dlrs serve: 41 requests on ")


def test_serve_argument_errors_exit_with_2() -> None:
    bad = dlrs("serve", "--latency-ms", "-5")
    assert bad.returncode == 2
    assert "unexpected argument '-5'" in bad.stderr
    port = dlrs("serve", "--port", "70000")
    assert port.returncode == 2
    assert "70000 is not in 0..=65535" in port.stderr


@pytest.mark.timeout(120)
def test_parity_passes_on_generated_and_given_images(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (40, 52, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "photo.jpg", quality=90)
    Image.fromarray(pixels).convert("P").save(tmp_path / "palette.png")
    Image.fromarray(pixels[:, :, 0]).save(tmp_path / "grey.bmp")
    result = dlrs("parity", "--images", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["images"] == 9
    chains = {c["chain"]: c for c in report["chains"]}
    assert chains["decode png/bmp/tiff"]["images"] == 8
    assert chains["decode jpeg/webp"]["images"] == 1
    assert chains["decode jpeg/webp"]["exact"] is False
    assert chains["resize_bicubic_down"]["images"] == 9
    assert not any(c["failed"] for c in report["chains"])
    assert all(c["max_diff"] == 0 for c in report["chains"] if c["exact"])


@pytest.mark.timeout(120)
def test_parity_fails_on_an_injected_difference() -> None:
    result = dlrs("parity", "--inject-difference", "to_tensor_normalize")
    assert result.returncode == 1
    line = next(row for row in result.stdout.splitlines() if row.startswith("to_tensor_normalize "))
    assert line.split()[-1] == "DIFFERS"
    assert "parity: 1 must be exact and differ: to_tensor_normalize" in result.stderr
    assert "generated/rgb-224.png: 1 of 150528 values differ, at most by 0.5" in result.stderr


def test_parity_reports_a_python_without_pillow(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named PIL' >&2\nexit 1\n")
    fake.chmod(0o755)
    result = dlrs("parity", "--python", str(fake))
    assert result.returncode == 1
    assert "the Python side failed" in result.stderr
    assert "No module named PIL" in result.stderr


@pytest.mark.timeout(120)
def test_prefetch_from_an_object_store(object_store_case: ObjectStoreCase, tmp_path: Path) -> None:
    case = object_store_case
    case.put_many({f"tiles/{slide}/{i}.png": f"{slide}-{i}".encode() for slide, i in [("a", 0), ("a", 1), ("b", 2)]})
    options = [arg for key, value in case.options.items() for arg in ("-o", f"{key}={value}")]
    template = case.url("tiles") + "/{slide}/{index}.png"
    args = ["prefetch", template, "-c", "slide=a,a,b", "--retries", "0", "--timeout", "10", *options]
    result = dlrs(*args, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert files(tmp_path / "out") == ["0.png", "1.png", "2.png"]
    assert (tmp_path / "out" / "2.png").read_bytes() == b"b-2"
    # A missing key is listed with its location (the store URL plus the key).
    missing = dlrs(*args[:3], "slide=a,b,b", *args[4:], "--out", str(tmp_path / "missing"))
    assert missing.returncode == 1
    assert f"\n  1\t{case.url('tiles')}/b/1.png\t" in missing.stderr


def test_parity_runs_the_python_of_dlrs_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DLRS_PYTHON", str(fake))
    result = dlrs("parity")
    assert result.returncode == 1
    assert f"the Python side failed ({fake}, exit status: 3)" in result.stderr


@pytest.mark.timeout(60)
def test_ctrl_c_stops_the_console_script(http_server: HttpTestServer, tmp_path: Path, sigint_raises: None) -> None:
    if not SCRIPT.exists():
        pytest.skip("the dlrs console script is not installed")
    template = http_server.base_url + "/item/{index}?delay=30"
    proc = subprocess.Popen(
        [str(SCRIPT), "prefetch", template, "--length", "4", "--out", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while http_server.in_flight < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert http_server.in_flight == 4
        proc.send_signal(signal.SIGINT)
        _, _ = proc.communicate(timeout=20)
    finally:
        kill_at_end(proc)
    assert proc.returncode == 130
    assert files(tmp_path) == []  # nothing was complete: the next run fetches everything
