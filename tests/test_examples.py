"""Every examples/*.py runs to completion: each asserts its own results, so a broken loader fails it.

An example that imports an optional framework (torch, torchvision, lightning, accelerate) is
skipped when that module is not installed.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))
OPTIONAL = ("torch", "torchvision", "lightning", "accelerate")
IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", re.MULTILINE)


def missing_modules(path: Path) -> list[str]:
    """The optional top-level modules the example imports that are not installed."""
    imported = {name.split(".")[0] for name in IMPORT.findall(path.read_text(encoding="utf-8"))}
    return [name for name in OPTIONAL if name in imported and importlib.util.find_spec(name) is None]


def test_examples_found() -> None:
    assert EXAMPLES, "no examples/*.py"


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_runs(path: Path) -> None:
    missing = missing_modules(path)
    if missing:
        pytest.skip(f"{path.name} needs {', '.join(missing)}")
    result = subprocess.run([sys.executable, str(path)], timeout=240, capture_output=True, text=True)
    assert result.returncode == 0, (
        f"{path.name} exited with {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    assert result.stdout.strip(), f"{path.name} printed nothing"
