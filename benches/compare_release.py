"""Side by side with a released wheel: runs ``benches/release_throughput.py`` under two
interpreters (ours, the released one), alternating, ``--rounds`` times, and prints each figure
per round and the ratio of the medians.

    python benches/compare_release.py --ours .venv313/bin/python --released venv-020/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("release_throughput.py")


def run(python: str, items: int) -> dict[str, float]:
    # Neither interpreter may import the other's package from the source tree.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, "-I", str(SCRIPT), "--items", str(items)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--released", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--items", type=int, default=200_000)
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"ours": [], "released": []}
    for r in range(args.rounds):
        order = ["ours", "released"] if r % 2 == 0 else ["released", "ours"]
        for who in order:
            rows[who].append(run(getattr(args, who), args.items))
        print(f"round {r + 1}: " + json.dumps({k: v[-1] for k, v in rows.items()}), file=sys.stderr)
    for key in ("workers_0", "workers_2", "first_batch_s"):
        ours = [row[key] for row in rows["ours"]]
        released = [row[key] for row in rows["released"]]
        ratio = statistics.median(ours) / statistics.median(released)
        if key == "first_batch_s":
            ratio = 1 / ratio  # above 1: ours is faster
        shown = " / ".join(f"{x:.4g}" for x in ours), " / ".join(f"{x:.4g}" for x in released)
        print(f"{key}: ours {shown[0]} | released {shown[1]} | ours faster by {ratio:.2f}x")


if __name__ == "__main__":
    main()
