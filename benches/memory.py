"""Memory: the process tree's peak RSS while iterating a dataset that holds 10 million Python
strings of metadata, with 2 workers, against the same process before iterating.

Threads share the dataset; torch's worker processes copy every page whose reference counts they
touch. Each loader runs in a fresh child process so that one does not inherit the other's heap.

    python benches/memory.py                  # both loaders, a table
    python benches/memory.py --items 1000000  # smaller
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, threading, time

def tree_rss(pid):
    # RSS of a process and all its descendants, in bytes, from /proc.
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
        todo.extend(children.get(p, []))
    return total

loader_name, n = sys.argv[1], int(sys.argv[2])

class Meta:
    def __init__(self, n):
        self.names = [f"slide-{i:09d}/tile-{i % 977}.png" for i in range(n)]
    def __len__(self):
        return len(self.names)
    def __getitem__(self, i):
        return len(self.names[i])

def identity(x):
    return x

ds = Meta(n)
if loader_name == "dataloader-rs":
    from dataloader_rs import PyDataloader, PyDataset
    loader = PyDataloader(ds, batch_size=256, num_workers=2, collate_fn=identity)
else:
    import torch.utils.data as tud
    loader = tud.DataLoader(ds, batch_size=256, num_workers=2, collate_fn=identity)

before = tree_rss(os.getpid())
peak = before
stop = threading.Event()
def sample():
    global peak
    while not stop.is_set():
        peak = max(peak, tree_rss(os.getpid()))
        time.sleep(0.05)
t = threading.Thread(target=sample)
t.start()
start = time.perf_counter()
items = sum(len(b) for b in loader)
seconds = time.perf_counter() - start
stop.set(); t.join()
peak = max(peak, tree_rss(os.getpid()))
print(json.dumps({"loader": loader_name, "items": items, "before_mb": before / 2**20,
                  "peak_mb": peak / 2**20, "ratio": peak / before, "seconds": seconds}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000_000)
    parser.add_argument("--loaders", default="dataloader-rs,torch")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for name in args.loaders.split(","):
        if name == "torch":
            try:
                import torch  # noqa: F401
            except ImportError:
                continue
        out = subprocess.run(
            [sys.executable, "-c", CHILD, name, str(args.items)], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    machine = {"python": sys.version.split()[0], "load_average": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d")}
    if args.json:
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
        return
    print(f"# {machine}")
    for r in rows:
        print(
            f"{r['loader']:<14} before {r['before_mb']:8.0f} MB   peak {r['peak_mb']:8.0f} MB   "
            f"{r['ratio']:.2f}x   epoch {r['seconds']:.1f} s"
        )


if __name__ == "__main__":
    main()
