"""dataloader_rs.transforms against Pillow (and torchvision's semantics, computed with NumPy):
bit for bit where the spec claims it (JPEG included), within the measured bound elsewhere."""

from __future__ import annotations

import io

import numpy as np
import pytest
from parity import (
    PILLOW_MAJOR,
    assert_matches,
    encode,
    pil_as_decoded,
    pil_decode,
    pil_image,
)
from PIL import Image as PILImage
from PIL import features

from dataloader_rs import Image
from dataloader_rs import transforms as T

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
SIZES = [(1, 1), (3, 5), (17, 31), (64, 48)]
KINDS = ["random", "smooth"]


def ours(x: object) -> np.ndarray:
    return np.asarray(x)


# ----- decoding -----

LOSSLESS = [
    ("PNG", "L", {}),
    ("PNG", "LA", {}),
    ("PNG", "RGB", {}),
    ("PNG", "RGBA", {}),
    ("PNG", "P", {}),
    ("PNG", "I;16", {}),
    ("BMP", "RGB", {}),
    ("BMP", "L", {}),
    ("BMP", "P", {}),
    ("TIFF", "L", {}),
    ("TIFF", "RGB", {}),
    ("TIFF", "RGBA", {}),
    ("TIFF", "CMYK", {}),
    ("TIFF", "RGB", {"compression": "tiff_lzw"}),
    ("TIFF", "RGB", {"compression": "tiff_adobe_deflate"}),
]
if features.check("webp"):
    LOSSLESS += [("WEBP", "RGB", {"lossless": True}), ("WEBP", "RGBA", {"lossless": True})]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("h", "w"), SIZES)
@pytest.mark.parametrize(("fmt", "mode", "options"), LOSSLESS, ids=lambda v: str(v) if v else "-")
def test_lossless_decode_is_exact(fmt, mode, options, h, w, kind):
    data = encode(pil_image(mode, h, w, kind, seed=h * w), fmt, **options)
    theirs = pil_as_decoded(pil_decode(data))
    assert_matches(T.Decode()(data), theirs)


def test_palette_with_transparency_decodes_to_rgba():
    image = pil_image("P", 9, 7, "random")
    image.info["transparency"] = 3
    data = encode(image, "PNG", transparency=3)
    decoded = T.Decode()(data)
    assert decoded.shape == (9, 7, 4)
    assert_matches(decoded, np.asarray(pil_decode(data).convert("RGBA")))


def test_16_bit_rgb_png_keeps_the_high_byte():
    rng = np.random.default_rng(3)
    v = rng.integers(0, 65536, (5, 6, 3), dtype=np.uint16)
    # Pillow writes 16-bit colour PNGs from raw big-endian samples only; build one by hand.
    import struct
    import zlib

    raw = b"".join(b"\x00" + v[y].astype(">u2").tobytes() for y in range(5))

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 6, 5, 16, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    theirs = np.asarray(pil_decode(png).convert("RGB"))
    assert_matches(T.Decode()(png), theirs)
    assert_matches(T.Decode()(png), (v >> 8).astype(np.uint8))


# JPEG against Pillow's (libjpeg-turbo's) own files: 4:4:4, 4:2:2, 4:2:0, grey, CMYK,
# progressive, restart markers; sizes from 1x1 (under 3 chroma samples wide libjpeg repeats
# instead of filtering) to 333x251. Entropy decoding, the islow inverse DCT, upsampling and
# colour conversion are all libjpeg's arithmetic, so every sample is Pillow's, edges included.
JPEG_CASES = {
    "4:4:4": ("RGB", {"subsampling": 0}, (1, 1)),
    "4:2:2": ("RGB", {"subsampling": 1}, (1, 2)),
    "4:2:0": ("RGB", {"subsampling": 2}, (2, 2)),
    "grey": ("L", {}, (1, 1)),
    "CMYK": ("CMYK", {}, (1, 1)),
    "progressive 4:2:0": ("RGB", {"subsampling": 2, "progressive": True}, (2, 2)),
    "progressive 4:4:4": ("RGB", {"subsampling": 0, "progressive": True}, (1, 1)),
    "restart every block, 4:2:0": ("RGB", {"subsampling": 2, "restart_marker_blocks": 1}, (2, 2)),
    "restart every row, 4:2:2": ("RGB", {"subsampling": 1, "restart_marker_rows": 1}, (1, 2)),
}
if PILLOW_MAJOR >= 11:
    # Components stored as R, G, B (Adobe transform 0): no colour conversion.
    JPEG_CASES["RGB components"] = ("RGB", {"subsampling": 0, "keep_rgb": True}, (1, 1))
JPEG_SIZES = [(1, 1), (2, 2), (3, 4), (9, 17), (17, 9), (16, 16), (100, 100), (251, 333)]


def jpeg_regions(h: int, w: int, factors: tuple[int, int]) -> dict[str, tuple[slice, slice]]:
    """The pixels made from the last chroma column, from the last chroma row (with the pixel
    before each, which the filter blends with it), and the rest."""
    fy, fx = factors
    top = max(fy * (-(-h // fy) - 1) - 1, 0) if fy > 1 else h
    left = max(fx * (-(-w // fx) - 1) - 1, 0) if fx > 1 else w
    return {
        "interior": (slice(0, top), slice(0, left)),
        "last chroma column": (slice(0, h), slice(left, w)),
        "last chroma row": (slice(top, h), slice(0, w)),
    }


@pytest.mark.parametrize("quality", [75, 95])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("h", "w"), JPEG_SIZES)
@pytest.mark.parametrize("case", list(JPEG_CASES))
def test_jpeg_is_pillows_within_the_bound_in_every_region(case, h, w, kind, quality):
    mode, options, factors = JPEG_CASES[case]
    if options.get("progressive") and kind == "random" and h * w > 100 * 100:
        # Pillow cannot write this one (its progressive encoder runs out of buffer on noise).
        kind = "smooth"
    data = encode(pil_image(mode, h, w, kind, seed=h * 31 + w), "JPEG", quality=quality, **options)
    a = np.asarray(T.Decode()(data)).astype(np.int16)
    b = pil_as_decoded(pil_decode(data)).astype(np.int16)
    assert a.shape == b.shape
    diffs = {
        name: int(np.abs(a[ys, xs] - b[ys, xs]).max(initial=0))
        for name, (ys, xs) in jpeg_regions(h, w, factors).items()
    }
    assert max(diffs.values()) == 0, f"{case} {w}x{h} q{quality} {kind}: {diffs}"


@pytest.mark.parametrize("reduce", [1, 2, 3, 4, 8, 9])
@pytest.mark.parametrize(("h", "w"), [(1, 1), (9, 17), (17, 9), (100, 100), (251, 333)])
@pytest.mark.parametrize("case", list(JPEG_CASES))
def test_draft_is_pillows_draft(case, h, w, reduce):
    """Decode(draft=) decodes at 1/1, 1/2, 1/4 or 1/8 scale in the DCT domain, as Pillow's
    draft asks libjpeg to: the same size and the same values."""
    mode, options, _ = JPEG_CASES[case]
    data = encode(pil_image(mode, h, w, "smooth", seed=h * 7 + w), "JPEG", quality=90, **options)
    size = (max(w // reduce, 1), max(h // reduce, 1))
    theirs = PILImage.open(io.BytesIO(data))
    theirs.draft(theirs.mode, size)
    assert_matches(T.Decode(draft=size)(data), pil_as_decoded(theirs))


@pytest.mark.parametrize(("oh", "ow"), [(224, 224), (100, 130), (60, 45), (30, 40), (375, 500)])
@pytest.mark.parametrize(("h", "w"), [(375, 500), (251, 333)])
def test_auto_draft_then_resize_is_pillows_draft_then_resize(h, w, oh, ow):
    """Decode(draft="auto") reduces as much as the Resize after it allows, as Pillow's draft
    of the output size does: the whole pipeline is Pillow's draft + resize to the bit."""
    data = encode(pil_image("RGB", h, w, "smooth", seed=h), "JPEG", quality=90)
    ours = T.Compose([T.Decode(draft="auto"), T.ToRgb(), T.Resize((oh, ow))])(data)
    theirs = PILImage.open(io.BytesIO(data))
    theirs.draft("RGB", (ow, oh))
    assert_matches(ours, np.asarray(theirs.convert("RGB").resize((ow, oh), PILImage.BILINEAR)))


def test_auto_draft_random_resized_crop_crops_the_same_region():
    """Under draft="auto" RandomResizedCrop resizes the region drawn for the full image, scaled
    to the fraction of a pixel, so the result stays within a few levels of the full-size
    pipeline (the reduced decode's own averaging makes the difference)."""
    data = encode(pil_image("RGB", 750, 1000, "smooth", seed=3), "JPEG", quality=90)
    crop = T.RandomResizedCrop(112)
    reduced = T.Compose([T.Decode(draft="auto"), T.ToRgb(), crop])
    full = T.Compose([T.Decode(), T.ToRgb(), crop])
    differ = 0
    for seed in range(12):
        a = np.asarray(reduced(data, seed=seed)).astype(np.int16)
        b = np.asarray(full(data, seed=seed)).astype(np.int16)
        assert a.shape == b.shape == (112, 112, 3)
        assert np.abs(a - b).max() <= 4, seed
        assert np.abs(a - b).mean() < 0.6, seed
        differ += not np.array_equal(a, b)
    assert differ > 0


@pytest.mark.parametrize("progressive", [False, True])
@pytest.mark.parametrize("subsampling", [0, 1, 2])
@pytest.mark.parametrize(("h", "w"), [(375, 500), (751, 1001)])
def test_photo_sized_jpegs_are_pillows(h, w, subsampling, progressive):
    data = encode(
        pil_image("RGB", h, w, "smooth", seed=h + subsampling),
        "JPEG",
        quality=90,
        subsampling=subsampling,
        progressive=progressive,
    )
    assert_matches(T.Decode()(data), pil_as_decoded(pil_decode(data)))


# ----- colour conversions -----


@pytest.mark.parametrize("source", ["L", "LA", "RGB", "RGBA", "P"])
@pytest.mark.parametrize(("transform", "target"), [(T.ToRgb, "RGB"), (T.ToRgba, "RGBA"), (T.ToGray, "L")])
def test_conversions_are_pillows(source, transform, target):
    data = encode(pil_image(source, 13, 11, "random", seed=5), "PNG")
    pil = pil_decode(data)
    if pil.mode == "P":
        pil = pil.convert("RGB")
    theirs = np.asarray(pil.convert(target))
    theirs = theirs[:, :, None] if theirs.ndim == 2 else theirs
    assert_matches(transform()(T.Decode()(data)), theirs)


# ----- geometry (torchvision / numpy semantics) -----


def torchvision_crop(a: np.ndarray, top: int, left: int, h: int, w: int) -> np.ndarray:
    """F.crop: zero padding where the window leaves the image."""
    out = np.zeros((h, w, a.shape[2]), a.dtype)
    for y in range(h):
        for x in range(w):
            sy, sx = top + y, left + x
            if 0 <= sy < a.shape[0] and 0 <= sx < a.shape[1]:
                out[y, x] = a[sy, sx]
    return out


def torchvision_center_crop(a: np.ndarray, ch: int, cw: int) -> np.ndarray:
    h, w = a.shape[:2]
    if ch > h or cw > w:
        pads = [(cw - w) // 2 if cw > w else 0, (ch - h) // 2 if ch > h else 0]
        pads += [(cw - w + 1) // 2 if cw > w else 0, (ch - h + 1) // 2 if ch > h else 0]
        a = np.pad(a, ((pads[1], pads[3]), (pads[0], pads[2]), (0, 0)))
        h, w = a.shape[:2]
        if ch == h and cw == w:
            return a
    top = round((h - ch) / 2.0)
    left = round((w - cw) / 2.0)
    return a[top : top + ch, left : left + cw]


ARRAYS = {
    "u8": lambda: np.random.default_rng(1).integers(0, 256, (7, 10, 3), dtype=np.uint8),
    "f32": lambda: np.random.default_rng(2).standard_normal((7, 10, 3)).astype(np.float32),
    "u8-gray": lambda: np.random.default_rng(3).integers(0, 256, (6, 5, 1), dtype=np.uint8),
}


CROPS = [
    (0, 0, 7, 10),
    (1, 2, 3, 4),
    (-2, 3, 5, 9),
    (5, 8, 4, 4),  # the window starts right of the image: zeros
    (-20, -20, 3, 3),
]


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize(("top", "left", "h", "w"), CROPS)
def test_crop(name, top, left, h, w):
    a = ARRAYS[name]()
    assert_matches(T.Crop(top, left, h, w)(a), torchvision_crop(a, top, left, h, w))


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, (2, 7), (6, 3), (9, 12), (11, 4)])
def test_center_crop_rounds_half_to_even(name, size):
    a = ARRAYS[name]()
    ch, cw = (size, size) if isinstance(size, int) else size
    assert_matches(T.CenterCrop(size)(a), torchvision_center_crop(a, ch, cw))


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("padding", [1, (2, 3), (1, 0, 4, 2), (5, 5)])
def test_pad_modes_are_numpys(name, mode, padding):
    a = ARRAYS[name]()
    if isinstance(padding, int):
        left = top = right = bottom = padding
    elif len(padding) == 2:
        left, top = padding
        right, bottom = padding
    else:
        left, top, right, bottom = padding
    widths = ((top, bottom), (left, right), (0, 0))
    theirs = np.pad(a, widths, mode=mode) if mode != "constant" else np.pad(a, widths, constant_values=0)
    assert_matches(T.Pad(padding, padding_mode=mode)(a), theirs)


def test_pad_fill_per_channel():
    a = ARRAYS["u8"]()
    theirs = np.stack([np.pad(a[:, :, c], 2, constant_values=v) for c, v in enumerate((10, 20, 30))], axis=-1)
    assert_matches(T.Pad(2, fill=(10, 20, 30))(a), theirs)


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize("anchor", ["top_left", "center"])
@pytest.mark.parametrize(("width", "height"), [(10, 7), (13, 7), (10, 12), (15, 16), (4, 4)])
def test_pad_to(name, anchor, width, height):
    a = ARRAYS[name]()
    dh, dw = max(height - a.shape[0], 0), max(width - a.shape[1], 0)
    if anchor == "top_left":
        widths = ((0, dh), (0, dw), (0, 0))
    else:
        widths = ((dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2), (0, 0))
    assert_matches(T.PadTo(width, height, anchor=anchor)(a), np.pad(a, widths))


@pytest.mark.parametrize("name", ARRAYS)
def test_flips_and_quarter_turns(name):
    a = ARRAYS[name]()
    assert_matches(T.HFlip()(a), a[:, ::-1])
    assert_matches(T.VFlip()(a), a[::-1])
    for k in (-5, -1, 0, 1, 2, 3, 4, 7):
        assert_matches(T.Rotate90(k)(a), np.rot90(a, k))


def test_geometry_on_chw_float_images():
    a = ARRAYS["f32"]()
    chw = T.Compose([T.ToChw()])(a)
    assert chw.layout == "chw"
    ref = np.ascontiguousarray(a.transpose(2, 0, 1))
    assert_matches(T.HFlip()(chw), ref[:, :, ::-1])
    assert_matches(T.Rotate90(1)(chw), np.rot90(ref, 1, axes=(1, 2)))
    assert_matches(T.Crop(1, 1, 3, 3)(chw), ref[:, 1:4, 1:4])
    assert_matches(T.Pad(1, padding_mode="reflect")(chw), np.pad(ref, ((0, 0), (1, 1), (1, 1)), mode="reflect"))


# ----- ToFloat, Normalize, the chain -----


def to_tensor(a: np.ndarray) -> np.ndarray:
    """torchvision's ToTensor values: x / 255 in float32 (layout kept)."""
    return a.astype(np.float32) / np.float32(255)


def normalize(a: np.ndarray, mean, std) -> np.ndarray:
    """torchvision's Normalize: (x - mean) / std with float32 mean and std, per channel (last axis)."""
    return (a - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


def test_to_float_is_to_tensor_on_every_value():
    a = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    assert_matches(T.ToFloat()(a), to_tensor(a))
    assert_matches(T.ToFloat(scale=False)(a), a.astype(np.float32))


def test_normalize_is_torchvisions():
    a = to_tensor(ARRAYS["u8"]())
    assert_matches(T.Normalize(MEAN, STD)(a), normalize(a, MEAN, STD))
    assert_matches(T.Normalize([0.5], [0.25])(a), normalize(a, [0.5] * 3, [0.25] * 3))
    chw = T.Compose([T.ToChw()])(a)
    ref = normalize(a, MEAN, STD).transpose(2, 0, 1)
    assert_matches(T.Normalize(MEAN, STD)(chw), np.ascontiguousarray(ref))


def test_fused_compose_equals_the_steps_one_by_one():
    a = ARRAYS["u8"]()
    steps = [T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()]
    one_by_one = a
    for s in steps:
        one_by_one = s(one_by_one)
    assert_matches(T.Compose(steps)(a), one_by_one)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "LA"])
@pytest.mark.parametrize(("h", "w"), [(224, 224), (100, 224), (31, 17), (1, 1)])
def test_tile_chain_is_pillow_pad_to_tensor_normalize(mode, h, w):
    data = encode(pil_image(mode, h, w, "smooth" if h > 50 else "random", seed=h), "PNG")
    chain = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(224, 224), T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()])
    rgb = np.asarray(pil_decode(data).convert("RGB"))
    padded = np.pad(rgb, ((0, 224 - h), (0, 224 - w), (0, 0)))
    theirs = normalize(to_tensor(padded), MEAN, STD).transpose(2, 0, 1)
    assert_matches(chain(data), np.ascontiguousarray(theirs))


# ----- Resize -----

FILTERS = {
    "nearest": PILImage.Resampling.NEAREST,
    "bilinear": PILImage.Resampling.BILINEAR,
    "bicubic": PILImage.Resampling.BICUBIC,
    "lanczos3": PILImage.Resampling.LANCZOS,
}
RESIZES = [
    ((40, 60), (20, 30)),
    ((40, 60), (13, 57)),
    ((37, 23), (50, 11)),
    ((64, 48), (64, 17)),
    ((17, 31), (40, 70)),
    ((50, 50), (7, 48)),  # Pillow 13 runs the vertical pass first here
    ((120, 30), (20, 28)),  # and here
]


def pillow_13_vertical_first(h: int, w: int, oh: int, ow: int) -> bool:
    """Pillow 13's pass order (12.x always starts with the horizontal pass)."""
    return oh < h and (h - oh) > 2 * (w - ow)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA"])
@pytest.mark.parametrize("interpolation", FILTERS)
@pytest.mark.parametrize(("size", "out"), RESIZES)
def test_resize_is_pillows(mode, interpolation, size, out):
    (h, w), (oh, ow) = size, out
    two_pass = interpolation != "nearest" and oh != h and ow != w
    if PILLOW_MAJOR < 13 and two_pass and pillow_13_vertical_first(h, w, oh, ow):
        pytest.skip(f"Pillow {PILImage.__version__} runs the passes in another order than Pillow 13")
    data = encode(pil_image(mode, h, w, "random", seed=oh * ow), "PNG")
    theirs = pil_decode(data).resize((ow, oh), FILTERS[interpolation])
    ours_ = T.Resize((oh, ow), interpolation=interpolation)(T.Decode()(data))
    assert_matches(ours_, pil_as_decoded(theirs))


@pytest.mark.parametrize(
    ("size", "max_size", "shape", "expected"),
    [
        (32, None, (40, 60), (32, 48)),
        (32, None, (60, 40), (48, 32)),
        (30, None, (37, 23), (48, 30)),
        (32, 40, (40, 60), (26, 40)),
    ],
)
def test_resize_int_size_follows_torchvision(size, max_size, shape, expected):
    data = encode(pil_image("RGB", *shape, "smooth"), "PNG")
    out = T.Resize(size, max_size=max_size)(T.Decode()(data))
    assert out.shape[:2] == expected
    theirs = pil_decode(data).resize((expected[1], expected[0]), PILImage.Resampling.BILINEAR)
    if PILLOW_MAJOR >= 13 or not pillow_13_vertical_first(*shape, *expected):
        assert_matches(out, np.asarray(theirs))


def test_pillow_version_is_known():
    # The suite's Resize expectations are Pillow 13's; with 12.x, the cases whose pass order
    # differs are skipped (see test_resize_is_pillows).
    assert PILLOW_MAJOR >= 10


# ----- Image.from_array round trips -----


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_from_array_round_trip(dtype):
    a = (np.arange(5 * 6 * 3) % 251).astype(dtype).reshape(5, 6, 3)
    assert_matches(Image.from_array(a), a)
    assert_matches(Image.from_array(np.ascontiguousarray(a.transpose(2, 0, 1)), layout="chw"), a)
    assert_matches(Image.from_array(a[::2, ::-1]), a[::2, ::-1])
    assert_matches(Image.from_array(a[:, :, 0]), a[:, :, :1])
