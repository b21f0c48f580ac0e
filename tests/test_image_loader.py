"""The Rust transforms and ImageCollator inside PyDataloader: Python datasets of encoded images
and the Rust FileDataset, with batches equal to the Pillow + NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
from parity import assert_matches, encode, pil_decode, pil_image

from dataloader_rs import FileDataset, Image, ImageBatch, ImageCollator, PyDataloader, PyDataset
from dataloader_rs import transforms as T

from conftest import write_files

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
TILE = 32


def tile_chain() -> T.Compose:
    return T.Compose([T.Decode(), T.ToRgb(), T.PadTo(TILE, TILE), T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()])


def tiles(n: int) -> list[bytes]:
    """PNG tiles of several modes, some smaller than TILE."""
    modes = ["RGB", "RGBA", "L", "P", "LA"]
    out = []
    for i in range(n):
        h, w = (TILE, TILE) if i % 3 else (TILE - 1 - i % 7, TILE - 5)
        out.append(encode(pil_image(modes[i % len(modes)], h, w, "random", seed=i), "PNG"))
    return out


def reference(data: bytes) -> np.ndarray:
    """Pillow's decoding, padding at the right and bottom, ToTensor and Normalize (CHW)."""
    rgb = np.asarray(pil_decode(data).convert("RGB"))
    padded = np.pad(rgb, ((0, TILE - rgb.shape[0]), (0, TILE - rgb.shape[1]), (0, 0)))
    x = padded.astype(np.float32) / np.float32(255)
    x = (x - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


class Blobs(PyDataset):
    def __init__(self, blobs: list[bytes]) -> None:
        super().__init__()
        self.blobs = blobs

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> bytes:
        return self.blobs[index]


DATA = tiles(20)
EXPECTED = np.stack([reference(d) for d in DATA])
#: The batches of :func:`tile_batches` over DATA.
BATCH_SHAPES = [(8, 3, TILE, TILE), (8, 3, TILE, TILE), (4, 3, TILE, TILE)]


def tile_batches(dataset, num_workers: int, item_concurrency: int, **kwargs) -> PyDataloader:
    """Batches of 8 tiles through tile_chain() and an ImageCollator with two buffers."""
    return PyDataloader(
        dataset,
        batch_size=8,
        num_workers=num_workers,
        item_concurrency=item_concurrency,
        transform=tile_chain(),
        collate_fn=ImageCollator(buffers=2),
        **kwargs,
    )


@pytest.mark.parametrize(("num_workers", "item_concurrency"), [(0, 1), (2, 1), (2, 3), (0, 4)])
def test_python_dataset_compose_and_image_collator(num_workers, item_concurrency):
    batches = list(tile_batches(Blobs(DATA), num_workers, item_concurrency))
    assert [b.shape for b in batches] == BATCH_SHAPES
    assert all(isinstance(b, ImageBatch) for b in batches)
    assert_matches(np.concatenate([np.asarray(b) for b in batches]), EXPECTED)
    x = np.from_dlpack(batches[0])
    assert x.flags.writeable
    x[0, 0, 0, 0] = 9.0
    assert np.asarray(batches[0])[0, 0, 0, 0] == 9.0


def test_return_indices_with_shuffle():
    loader = PyDataloader(
        Blobs(DATA),
        batch_size=6,
        shuffle=True,
        seed=3,
        num_workers=2,
        transform=tile_chain(),
        collate_fn=ImageCollator(),
        return_indices=True,
    )
    seen = []
    for batch, indices in loader:
        assert_matches(batch, EXPECTED[indices])
        seen += indices
    assert sorted(seen) == list(range(len(DATA)))


def test_single_transform_and_nhwc_uint8():
    square = [encode(pil_image("RGB", 8, 8, seed=i), "PNG") for i in range(5)]
    loader = PyDataloader(Blobs(square), batch_size=5, transform=T.Decode(), collate_fn=ImageCollator("NHWC", "uint8"))
    (batch,) = list(loader)
    assert_matches(batch, np.stack([np.asarray(pil_decode(d)) for d in square]))


def test_python_transform_with_metadata():
    chain = tile_chain()
    loader = PyDataloader(
        Blobs(DATA),
        batch_size=10,
        num_workers=2,
        transform=lambda i, png: (chain(png), {"index": i}),
        collate_fn=ImageCollator(),
    )
    for n, (batch, meta) in enumerate(loader):
        assert meta == [{"index": i} for i in range(n * 10, n * 10 + 10)]
        assert_matches(batch, EXPECTED[n * 10 : n * 10 + 10])


def test_without_collator_a_batch_is_a_list_of_images():
    loader = PyDataloader(Blobs(DATA[:4]), batch_size=4, transform=tile_chain())
    (batch,) = list(loader)
    assert isinstance(batch, list)
    assert all(isinstance(im, Image) for im in batch)
    assert_matches(np.stack(batch), EXPECTED[:4])
    loader = PyDataloader(Blobs(DATA[:4]), batch_size=4, transform=tile_chain(), collate_fn=np.stack)
    assert_matches(next(iter(loader)), EXPECTED[:4])


def test_a_bad_item_fails_its_batch_only():
    blobs = [*DATA[:4], b"garbage", *DATA[5:8]]
    loader = PyDataloader(Blobs(blobs), batch_size=4, num_workers=2, transform=tile_chain(), collate_fn=ImageCollator())
    it = iter(loader)
    assert_matches(next(it), EXPECTED[:4])
    with pytest.raises(ValueError, match="unknown image format"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_images_of_different_shapes_fail_the_batch():
    sizes = [encode(pil_image("RGB", 8, 8 + i), "PNG") for i in range(3)]
    loader = PyDataloader(Blobs(sizes), batch_size=3, transform=T.Decode(), collate_fn=ImageCollator())
    with pytest.raises(ValueError, match=r"image 1 of the batch is 8x9x3 \(height x width x channels\)"):
        next(iter(loader))


def test_normalize_before_to_float_fails_the_batch():
    loader = PyDataloader(
        Blobs(DATA[:2]),
        batch_size=2,
        transform=T.Compose([T.Decode(), T.Normalize(MEAN, STD)]),
        collate_fn=ImageCollator(),
    )
    with pytest.raises(ValueError, match=r"Normalize expects a float32 image \(apply ToFloat first\)"):
        next(iter(loader))


# ----- the Rust dataset path: no interpreter until the batch object -----


@pytest.fixture
def tile_files(tmp_path):
    return write_files(tmp_path, DATA, ".png")


@pytest.mark.parametrize(("num_workers", "item_concurrency"), [(1, 1), (2, 4)])
def test_file_dataset_compose_and_image_collator(tile_files, num_workers, item_concurrency):
    out = list(tile_batches(FileDataset(tile_files), num_workers, item_concurrency, return_indices=True))
    assert [b.shape for b, _ in out] == BATCH_SHAPES
    for batch, indices in out:
        assert isinstance(batch, ImageBatch)
        assert_matches(batch, EXPECTED[indices])


def test_file_dataset_bad_file_and_metadata(tile_files, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(DATA[0][:100])
    chain = tile_chain()
    loader = PyDataloader(
        FileDataset([*tile_files[:2], str(bad), tile_files[3]]),
        batch_size=2,
        transform=chain,
        collate_fn=ImageCollator(),
    )
    it = iter(loader)
    assert_matches(next(it), EXPECTED[:2])
    with pytest.raises(ValueError, match="truncated PNG image"):
        next(it)
    loader = PyDataloader(
        FileDataset(tile_files[:4]),
        batch_size=4,
        transform=lambda i, png: (chain(png), i * 10),
        collate_fn=ImageCollator(),
    )
    batch, meta = next(iter(loader))
    assert meta == [0, 10, 20, 30]
    assert_matches(batch, EXPECTED[:4])


def test_file_dataset_bytes_without_decode_fail_the_collator(tile_files):
    loader = PyDataloader(FileDataset(tile_files[:2]), batch_size=2, collate_fn=ImageCollator())
    with pytest.raises(TypeError, match="item 0 of the batch is bytes"):
        next(iter(loader))
    loader = PyDataloader(
        FileDataset(tile_files[:2]), batch_size=2, transform=T.Compose([]), collate_fn=ImageCollator()
    )
    with pytest.raises(ValueError, match=r"item 0 of the batch is .* bytes of encoded data"):
        next(iter(loader))
