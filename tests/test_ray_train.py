"""Ray Train: each rank of a TorchTrainer loads a disjoint share of equal length, a stream as
a map-style dataset, with no argument telling the loader about the run."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ray.train.torch")

CLIENT = Path(__file__).parent / "clients" / "ray_train.py"


@pytest.mark.timeout(400)
def test_ray_train_ranks_load_disjoint_equal_shares(tmp_path):
    out = tmp_path / "ranks.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    subprocess.run([sys.executable, str(CLIENT), str(out)], env=env, check=True, capture_output=True, timeout=360)
    zero, one = sorted(json.loads(out.read_text()), key=lambda r: r["rank"])
    # The stream: every second item to each rank, in complete rounds (24 of the 25 items).
    assert list(itertools.chain(*zero["stream"])) == list(range(0, 24, 2))
    assert list(itertools.chain(*one["stream"])) == list(range(1, 24, 2))
    # Shuffled by index: one order on both ranks (the same seed), split as DistributedSampler
    # splits it, padded to equal shares; together they cover every item.
    mine = [list(itertools.chain(*r["shuffled"])) for r in (zero, one)]
    assert len(mine[0]) == len(mine[1]) == 13
    assert len(zero["shuffled"]) == len(one["shuffled"]) == 5
    assert set(mine[0]) | set(mine[1]) == set(range(25))
    assert len(set(mine[0]) & set(mine[1])) == 1  # the one item that pads 25 to 26
