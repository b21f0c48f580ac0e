"""dataloader-rs: a DataLoader with torch.utils.data.DataLoader's interface and a Rust core.

Workers are threads, not processes: samples are handed over by reference, an epoch starts in
milliseconds, and work that releases the interpreter (I/O, NumPy, the Rust datasets and
transforms) runs in parallel.
"""

from dataloader_rs import text, transforms
from dataloader_rs._datasets import PyAsyncDataset, PyDataset, PyIterableDataset
from dataloader_rs._errors import Failure, TooManyFailures
from dataloader_rs._loader import BatchSampler, PyDataloader, RandomSampler, SequentialSampler, SkipFirstBatches
from dataloader_rs._native import (
    FileDataset,
    HttpDataset,
    ObjectStoreDataset,
    ShardChangedError,
    TarDataset,
    TarStream,
    __version__,
)
from dataloader_rs._workers import WorkerInfo, get_worker_info, item_seed
from dataloader_rs.transforms import Image, ImageBatch, ImageCollator

__all__ = [
    "BatchSampler",
    "Failure",
    "FileDataset",
    "HttpDataset",
    "Image",
    "ImageBatch",
    "ImageCollator",
    "ObjectStoreDataset",
    "PyAsyncDataset",
    "PyDataloader",
    "PyDataset",
    "PyIterableDataset",
    "RandomSampler",
    "SequentialSampler",
    "ShardChangedError",
    "SkipFirstBatches",
    "TarDataset",
    "TarStream",
    "TooManyFailures",
    "WorkerInfo",
    "__version__",
    "get_worker_info",
    "item_seed",
    "text",
    "transforms",
]
