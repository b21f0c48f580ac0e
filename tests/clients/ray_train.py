"""Ray Train's TorchTrainer with two CPU workers (gloo), each loading a stream and a shuffled
map-style dataset with the loader's defaults; rank 0 writes what every rank got to argv[1].

Run in a process of its own by tests/test_ray_train.py: Ray starts a local cluster (bound to
127.0.0.1) and worker processes.
"""

import json
import os
import sys

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

ITEMS = 25


def loop(config: dict) -> None:
    import torch.distributed as dist

    from dataloader_rs import PyDataloader, PyIterableDataset

    class Count(PyIterableDataset):
        def __iter__(self):
            return iter(range(ITEMS))

    def items(loader: PyDataloader) -> list[list[int]]:
        return [[int(x) for x in batch] for batch in loader]

    stream = items(PyDataloader(Count(), batch_size=3, num_workers=2, collate_fn=list))
    shuffled = items(PyDataloader(list(range(ITEMS)), batch_size=3, shuffle=True, collate_fn=list))
    mine = {"rank": dist.get_rank(), "stream": stream, "shuffled": shuffled}
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() == 0:
        with open(config["out"], "w") as f:
            json.dump(gathered, f)


def main() -> None:
    out = sys.argv[1]
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        trainer = TorchTrainer(
            loop,
            train_loop_config={"out": out},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.dirname(out)),
        )
        trainer.fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
