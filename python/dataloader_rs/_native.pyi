import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Self, TypeAlias, TypedDict, final

from typing_extensions import disjoint_base

from dataloader_rs._aio import EventLoop
from dataloader_rs._errors import Failure

_Column: TypeAlias = Sequence[int] | Sequence[str] | Any  # or a numpy array of ints or strs
_Path: TypeAlias = str | os.PathLike[str]

__all__ = [
    "BatchIterator",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Crop",
    "Decode",
    "FileDataset",
    "HFlip",
    "HttpDataset",
    "Image",
    "ImageBatch",
    "ImageCollator",
    "Loader",
    "Normalize",
    "ObjectStoreDataset",
    "Pad",
    "PadTo",
    "RandomApply",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomTransform",
    "RandomVerticalFlip",
    "Resize",
    "Rotate90",
    "ShardChangedError",
    "TarDataset",
    "TarStream",
    "TarStreamIterator",
    "ToChw",
    "ToFloat",
    "ToGray",
    "ToHwc",
    "ToRgb",
    "ToRgba",
    "Tokenize",
    "Transform",
    "TrivialAugmentWide",
    "VFlip",
    "__version__",
    "cli_main",
    "parked_workers",
    "worker_state",
]

__version__: str

def cli_main(argv: list[str]) -> int: ...
def parked_workers() -> int: ...
def worker_state() -> tuple[Any, int | None, int, int, int | None] | None: ...

@final
class Loader:
    # Built from ``_loader.py``'s arguments as the user gave them: every value is checked here
    # (crates/py/src/loader/spec.rs), hence ``object``.
    def __new__(
        cls,
        *,
        kind: Literal["python", "rust", "async", "stream"],
        dataset: object,
        batch_size: object,
        num_workers: object,
        prefetch_depth: object,
        prefetch_factor: object,
        drop_last: object,
        shuffle: object,
        seed: object,
        base_seed: int | None,
        return_indices: object,
        timeout: object,
        getitem: Callable[[int], Any] | None = None,
        getitems: Callable[[list[int]], Any] | None = None,
        event_loop: EventLoop | None = None,
        transform: Callable[..., Any] | None = None,
        transform_takes_index: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        runtime_threads: object = None,
        item_concurrency: object = None,
        items_in_flight: object = None,
        rank: object = None,
        world_size: object = None,
        max_failures: object = None,
        stream_readers: object = None,
        shuffle_buffer: object = None,
        make_iter: Callable[[], Any] | None = None,
    ) -> Self: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def prefetch_depth(self) -> int: ...
    @property
    def item_concurrency(self) -> int: ...
    @property
    def runtime_threads(self) -> int | None: ...
    @property
    def items_in_flight(self) -> int | None: ...
    @property
    def timeout(self) -> float: ...
    @property
    def shuffle(self) -> bool: ...
    @property
    def explicit_shard(self) -> tuple[int, int] | None: ...
    @property
    def base_seed(self) -> int: ...
    @property
    def transform_threads(self) -> int: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def epoch(self) -> int: ...
    def num_batches(self, len: int) -> int: ...
    def epoch_over(self, len: int, *, seed: int | None = None) -> BatchIterator: ...
    def epoch_stream(self) -> BatchIterator: ...
    def stream_state(self) -> tuple[int, int, Any] | None: ...
    def restore_stream(self, position: int) -> None: ...
    def epoch_from(
        self,
        *,
        sampler: Iterable[int] | None = None,
        batch_sampler: Iterable[Iterable[int]] | None = None,
    ) -> BatchIterator: ...
    def share_len(self, len: int) -> int: ...
    def order_of(self, epoch: int, len: int, *, seed: int | None = None) -> list[int]: ...
    def set_shard(self, rank: int, world_size: int) -> None: ...
    def clear_shard(self) -> None: ...
    def set_base_seed(self, base_seed: int) -> None: ...
    def set_epoch(self, epoch: int) -> None: ...
    def resume(self, epoch: int, position: int) -> None: ...
    def progress(self) -> tuple[int, int, int, bool]: ...
    def resume_point(self) -> tuple[int, int]: ...
    def failures(self) -> list[Failure]: ...
    def stats(self) -> dict[str, Any]: ...

@final
class BatchIterator:
    def __iter__(self) -> BatchIterator: ...
    def __next__(self) -> Any: ...
    def __len__(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def position(self) -> int: ...

@final
class HttpDataset:
    def __new__(
        cls,
        urls: Sequence[str],
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = 30.0,
        connect_timeout: float | None = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
        cache_dir: _Path | None = None,
        cache_bytes: int | None = None,
    ) -> HttpDataset: ...
    @classmethod
    def from_template(
        cls,
        template: str,
        columns: Mapping[str, _Column] | None = None,
        *,
        length: int | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = 30.0,
        connect_timeout: float | None = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
        cache_dir: _Path | None = None,
        cache_bytes: int | None = None,
    ) -> HttpDataset: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> bytes: ...
    def cache_stats(self) -> _CacheStats | None: ...

@final
class FileDataset:
    def __new__(
        cls,
        paths: Sequence[_Path],
        *,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> FileDataset: ...
    @classmethod
    def from_template(
        cls,
        template: _Path,
        columns: Mapping[str, _Column] | None = None,
        *,
        length: int | None = None,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> FileDataset: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> bytes: ...

@final
class ObjectStoreDataset:
    def __new__(
        cls,
        url: str,
        keys: Sequence[str],
        *,
        options: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
        cache_dir: _Path | None = None,
        cache_bytes: int | None = None,
    ) -> ObjectStoreDataset: ...
    @classmethod
    def from_template(
        cls,
        url: str,
        template: str,
        columns: Mapping[str, _Column] | None = None,
        *,
        length: int | None = None,
        options: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
        cache_dir: _Path | None = None,
        cache_bytes: int | None = None,
    ) -> ObjectStoreDataset: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> bytes: ...
    def cache_stats(self) -> _CacheStats | None: ...

class _CacheStats(TypedDict):
    hits: int
    misses: int
    written: int
    not_admitted: int
    corrupt: int
    evicted: int
    bytes: int
    writes_off: bool

class ShardChangedError(OSError): ...

@final
class TarDataset:
    def __new__(
        cls,
        locations: Sequence[_Path],
        *,
        member: str | None = None,
        index_dir: _Path | None = None,
        cache_dir: _Path | None = None,
        cache_bytes: int | None = None,
        headers: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
        timeout: float | None = 30.0,
        connect_timeout: float | None = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> TarDataset: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> dict[str, bytes] | bytes: ...
    def key(self, index: int) -> str: ...
    @property
    def num_shards(self) -> int: ...
    @property
    def member(self) -> str | None: ...
    def cache_stats(self) -> _CacheStats | None: ...

@final
class TarStream:
    def __new__(
        cls,
        locations: Sequence[_Path],
        *,
        shuffle_shards: bool = False,
        seed: int = 0,
        split_by_rank: bool = False,
        member: str | None = None,
        headers: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
        timeout: float | None = 30.0,
        connect_timeout: float | None = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        max_bytes: int = 67108864,
    ) -> TarStream: ...
    def __iter__(self) -> TarStreamIterator: ...
    def set_rank(self, rank: int, world_size: int) -> bool: ...
    def set_epoch(self, epoch: int) -> None: ...
    @property
    def epoch(self) -> int: ...
    def state_dict(self) -> dict[str, int]: ...
    def load_state_dict(self, state: Mapping[str, int]) -> None: ...
    @property
    def num_shards(self) -> int: ...
    @property
    def member(self) -> str | None: ...

@final
class TarStreamIterator:
    def __iter__(self) -> Self: ...
    def __next__(self) -> dict[str, bytes | str] | bytes: ...

# ----- images: dataloader_rs.transforms, Image, ImageCollator, ImageBatch -----

_Encoded: TypeAlias = bytes | bytearray | memoryview
_Size: TypeAlias = int | tuple[int, int] | list[int]
_Fill: TypeAlias = float | tuple[float, ...] | list[float]

@final
class Image:
    @classmethod
    def from_array(cls, obj: Any, layout: Literal["hwc", "chw"] = "hwc") -> Image: ...
    @property
    def shape(self) -> tuple[int, int, int]: ...
    @property
    def dtype(self) -> Literal["uint8", "float32"]: ...
    @property
    def layout(self) -> Literal["hwc", "chw"]: ...
    @property
    def height(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def channels(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    def __dlpack__(
        self,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

@final
class ImageBatch:
    @property
    def shape(self) -> tuple[int, int, int, int]: ...
    @property
    def dtype(self) -> Literal["uint8", "float32"]: ...
    @property
    def layout(self) -> Literal["NCHW", "NHWC"]: ...
    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    def __dlpack__(
        self,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

@final
class ImageCollator:
    def __new__(
        cls,
        layout: Literal["NCHW", "NHWC"] = "NCHW",
        dtype: Literal["uint8", "float32"] | None = None,
        buffers: int = 0,
    ) -> ImageCollator: ...
    @property
    def layout(self) -> Literal["NCHW", "NHWC"]: ...
    @property
    def dtype(self) -> Literal["uint8", "float32"] | None: ...
    @property
    def buffers(self) -> int: ...
    @property
    def pooled(self) -> int: ...
    def __call__(self, items: Iterable[Image] | Iterable[tuple[Image, Any]], /) -> Any: ...

@final
class Tokenize:
    def __new__(
        cls,
        tokenizer: Any,
        *,
        field: str | None = None,
        into: str = "input_ids",
        add_special_tokens: bool = True,
    ) -> Tokenize: ...
    def __call__(self, item: Any, /) -> Any: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def field(self) -> str | None: ...
    @property
    def into(self) -> str: ...
    @property
    def add_special_tokens(self) -> bool: ...
    def __reduce__(self) -> tuple[Any, tuple[str]]: ...

@disjoint_base
class Transform:
    def __call__(self, obj: _Encoded | Image | Any, /, seed: int | None = None) -> Image: ...

@final
class Decode(Transform):
    def __new__(
        cls,
        max_width: int = 16384,
        max_height: int = 16384,
        max_alloc: int = 268435456,
        draft: int | tuple[int, int] | Literal["auto"] | None = None,
    ) -> Decode: ...

@final
class ToRgb(Transform):
    def __new__(cls) -> ToRgb: ...

@final
class ToRgba(Transform):
    def __new__(cls) -> ToRgba: ...

@final
class ToGray(Transform):
    def __new__(cls) -> ToGray: ...

@final
class Crop(Transform):
    def __new__(cls, top: int, left: int, height: int, width: int) -> Crop: ...

@final
class CenterCrop(Transform):
    def __new__(cls, size: _Size) -> CenterCrop: ...

@final
class Pad(Transform):
    def __new__(
        cls,
        padding: int | tuple[int, ...] | list[int],
        fill: _Fill = 0,
        padding_mode: Literal["constant", "edge", "reflect", "symmetric"] = "constant",
    ) -> Pad: ...

@final
class PadTo(Transform):
    def __new__(
        cls, width: int, height: int, fill: _Fill = 0, anchor: Literal["top_left", "center"] = "top_left"
    ) -> PadTo: ...

@final
class Resize(Transform):
    def __new__(
        cls,
        size: _Size,
        interpolation: Literal["nearest", "bilinear", "bicubic", "lanczos3"] | Any = "bilinear",
        max_size: int | None = None,
        antialias: bool = True,
    ) -> Resize: ...

@final
class HFlip(Transform):
    def __new__(cls) -> HFlip: ...

@final
class VFlip(Transform):
    def __new__(cls) -> VFlip: ...

@final
class Rotate90(Transform):
    def __new__(cls, k: int = 1) -> Rotate90: ...

@final
class ToFloat(Transform):
    def __new__(cls, scale: bool = True) -> ToFloat: ...

@final
class Normalize(Transform):
    def __new__(cls, mean: float | Sequence[float], std: float | Sequence[float]) -> Normalize: ...

@final
class ToChw(Transform):
    def __new__(cls) -> ToChw: ...

@final
class ToHwc(Transform):
    def __new__(cls) -> ToHwc: ...

@final
class Compose(Transform):
    def __new__(cls, transforms: Iterable[Transform]) -> Compose: ...
    @property
    def transforms(self) -> list[Transform]: ...

_Interpolation: TypeAlias = Literal["nearest", "nearest-exact", "bilinear", "bicubic", "lanczos"]

@disjoint_base
class RandomTransform(Transform):
    def params(self, *, height: int, width: int, seed: int | None = None) -> dict[str, Any]: ...

@final
class RandomResizedCrop(RandomTransform):
    def __new__(
        cls,
        size: _Size,
        scale: tuple[float, float] | list[float] = (0.08, 1.0),
        ratio: tuple[float, float] | list[float] = ...,
        interpolation: _Interpolation | Any = "bilinear",
        antialias: bool = True,
    ) -> RandomResizedCrop: ...

@final
class RandomCrop(RandomTransform):
    def __new__(
        cls,
        size: _Size,
        padding: int | Sequence[int] | None = None,
        pad_if_needed: bool = False,
        fill: _Fill = 0,
        padding_mode: Literal["constant", "edge", "reflect", "symmetric"] = "constant",
    ) -> RandomCrop: ...

@final
class RandomHorizontalFlip(RandomTransform):
    def __new__(cls, p: float = 0.5) -> RandomHorizontalFlip: ...

@final
class RandomVerticalFlip(RandomTransform):
    def __new__(cls, p: float = 0.5) -> RandomVerticalFlip: ...

@final
class RandomErasing(RandomTransform):
    def __new__(
        cls,
        p: float = 0.5,
        scale: tuple[float, float] | list[float] = (0.02, 0.33),
        ratio: tuple[float, float] | list[float] = (0.3, 3.3),
        value: float | Sequence[float] | Literal["random"] = 0,
    ) -> RandomErasing: ...

@final
class RandomApply(RandomTransform):
    def __new__(cls, transforms: Iterable[Transform], p: float = 0.5) -> RandomApply: ...
    @property
    def transforms(self) -> list[Transform]: ...

_Jitter: TypeAlias = float | tuple[float, float] | list[float] | None

@final
class ColorJitter(RandomTransform):
    def __new__(
        cls, brightness: _Jitter = 0, contrast: _Jitter = 0, saturation: _Jitter = 0, hue: _Jitter = 0
    ) -> ColorJitter: ...

@final
class RandomGrayscale(RandomTransform):
    def __new__(cls, p: float = 0.1) -> RandomGrayscale: ...

@final
class TrivialAugmentWide(RandomTransform):
    def __new__(
        cls,
        num_magnitude_bins: int = 31,
        interpolation: Literal["nearest", "bilinear"] | Any = "nearest",
        fill: _Fill | None = None,
    ) -> TrivialAugmentWide: ...
