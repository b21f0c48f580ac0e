"""The one comparison helper of the image parity tests, and the images they are made of.

``assert_matches(ours, theirs, max_diff=0)`` compares two arrays of the same shape and type
(anything ``np.asarray`` takes: an ``Image``, an ``ImageBatch``, a Pillow image, an array)
and fails with the largest and mean absolute differences and where the largest one is.
``measure`` gives the same two figures without asserting, for the tests that record them.
``assert_near_torch`` is the bound for values torch computes in float32, whose rounding depends on
the CPU kernels torch picks.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import PIL
from PIL import Image as PILImage

PILLOW_MAJOR = int(PIL.__version__.split(".")[0])


@dataclass(frozen=True)
class Diff:
    largest: float
    mean: float
    where: tuple[int, ...]

    def __str__(self) -> str:
        return f"largest difference {self.largest:g} at {self.where}, mean {self.mean:.4g}"


def _array(x: object) -> np.ndarray:
    return np.asarray(x)


def measure(ours: object, theirs: object) -> Diff:
    """The largest and mean absolute differences (computed in float64)."""
    a, b = _array(ours), _array(theirs)
    assert a.shape == b.shape, f"shapes differ: ours {a.shape}, theirs {b.shape}"
    assert a.dtype == b.dtype, f"types differ: ours {a.dtype}, theirs {b.dtype}"
    if a.size == 0:
        return Diff(0.0, 0.0, ())
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(d)), d.shape))
    return Diff(float(d.max()), float(d.mean()), where)


def assert_matches(ours: object, theirs: object, max_diff: float = 0) -> Diff:
    """Same shape, same type, and no value further apart than ``max_diff`` (0: bit for bit)."""
    diff = measure(ours, theirs)
    if max_diff == 0:
        a, b = _array(ours), _array(theirs)
        # Bitwise equality (NaN == NaN, -0.0 != 0.0) for exactness claims.
        same = a.tobytes() == b.tobytes()
        assert same, f"not bit for bit equal: {diff}"
    else:
        assert diff.largest <= max_diff, f"{diff} (allowed {max_diff})"
    return diff


def torch_kernels() -> str:
    """The CPU kernels torch runs: "DEFAULT", "AVX2" or "AVX512" (``ATEN_CPU_CAPABILITY``
    forces one)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def assert_near_torch(ours: object, theirs: object, steps: int = 1) -> Diff:
    """The promise for values torch computes in float32 (resizes, colour, affine sampling):
    never more than one level from torch's per step of the chain, whatever kernels it runs;
    with its AVX2 or AVX-512 kernels (the ones we follow) at most 1 % of the values, or 2,
    differ at all. torch's own results differ that much between its kernel sets and CPUs."""
    diff = assert_matches(ours, theirs, max_diff=max(1, steps))
    if torch_kernels() in ("AVX2", "AVX512"):
        a, b = _array(ours), _array(theirs)
        differing = int(np.count_nonzero(a != b))
        allowed = max(2, a.size // 100)
        assert differing <= allowed, f"{differing} of {a.size} values differ ({diff})"
    return diff


# ----- images made by the tests -----


def content(h: int, w: int, c: int, kind: str, seed: int = 0) -> np.ndarray:
    """uint8 values of shape (h, w, c): "random" noise or "smooth" gradients."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = []
    for ch in range(c):
        phase = rng.uniform(0, 2 * np.pi)
        v = 127.5 + 127.5 * np.sin(x / max(w, 1) * 3.0 + y / max(h, 1) * 2.0 * (ch + 1) + phase)
        planes.append(v)
    return np.clip(np.rint(np.stack(planes, axis=-1)), 0, 255).astype(np.uint8)


def pil_image(mode: str, h: int, w: int, kind: str = "random", seed: int = 0) -> PILImage.Image:
    """A Pillow image of `mode` (L, LA, RGB, RGBA, P, I;16, CMYK)."""
    if mode == "P":
        rgb = PILImage.fromarray(content(h, w, 3, kind, seed), "RGB")
        return rgb.quantize(colors=64)
    if mode == "I;16":
        rng = np.random.default_rng(seed)
        v = rng.integers(0, 65536, (h, w), dtype=np.uint16)
        return PILImage.frombytes("I;16", (w, h), v.astype("<u2").tobytes())
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "CMYK": 4}[mode]
    arr = content(h, w, channels, kind, seed)
    if channels == 1:
        return PILImage.fromarray(arr[:, :, 0], "L")
    return PILImage.frombytes(mode, (w, h), arr.tobytes())


def encode(image: PILImage.Image, fmt: str, **options: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **options)
    return buf.getvalue()


def pil_decode(data: bytes) -> PILImage.Image:
    image = PILImage.open(io.BytesIO(data))
    image.load()
    return image


def pil_as_decoded(image: PILImage.Image) -> np.ndarray:
    """The uint8 HWC array Decode promises for a decoded Pillow image: the image's own channels
    (palettes expanded to RGB, or RGBA with transparency; 16-bit grey as Pillow converts it to L;
    CMYK as Pillow converts it to RGB)."""
    mode = image.mode
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode in ("I;16", "I;16B", "I", "I;16L"):
        image = image.convert("L")
    elif mode == "CMYK":
        image = image.convert("RGB")
    elif mode == "1":
        image = image.convert("L")
    arr = np.asarray(image)
    return arr[:, :, None] if arr.ndim == 2 else arr
