"""A real torchrun of 2 processes on the gloo backend: each rank loads its share and the shares
are all-gathered and checked, with and without a seed. Skipped where torch is not installed
(the free-threaded build's venv has none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch.distributed as dist
    sys.path.insert(0, sys.argv[1])
    from conftest import Range
    from dataloader_rs import PyDataloader

    dist.init_process_group("gloo")
    seeded = PyDataloader(Range(101), batch_size=8, shuffle=True, seed=9, num_workers=2)
    # Without a seed each process draws its own; the ranks must still agree on the order.
    unseeded = PyDataloader(Range(101), batch_size=8, shuffle=True, num_workers=2)
    shares = []
    for loader in (seeded, unseeded):
        for epoch in range(2):
            loader.set_epoch(epoch)
            mine = [x for b in loader for x in b]
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, mine)
            shares.append(gathered)
    if dist.get_rank() == 0:
        with open(sys.argv[2], "w") as f:
            json.dump(shares, f)
    dist.destroy_process_group()
    """
)


@pytest.mark.timeout(300)
def test_torchrun_two_ranks_cover_the_dataset(tmp_path):
    pytest.importorskip("torch.distributed")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "shares.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        str(script), os.path.dirname(__file__), str(out),
    ]  # fmt: skip
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=240)
    epochs = json.loads(out.read_text())
    assert len(epochs) == 4  # two epochs of the seeded loader, two of the unseeded one
    for shares in epochs:
        assert [len(s) for s in shares] == [51, 51]  # 101 items, padded to 102
        assert set(shares[0]) | set(shares[1]) == set(range(101))
        assert len(set(shares[0]) & set(shares[1])) == 1  # only the one padded item repeats
    assert epochs[0] != epochs[1]
    assert epochs[2] != epochs[3]
