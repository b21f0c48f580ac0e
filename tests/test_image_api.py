"""The Python API of the Rust image transforms: constructors and their errors, calls, Image
(buffer protocol, DLPack, from_array) and ImageCollator / ImageBatch."""

from __future__ import annotations

import ctypes
import gc
import inspect
import io
import subprocess
import sys
import threading

import numpy as np
import pytest
from parity import assert_matches, encode, pil_image

import dataloader_rs
from dataloader_rs import Image, ImageBatch, ImageCollator
from dataloader_rs import transforms as T

PNG = encode(pil_image("RGB", 6, 5, "random"), "PNG")
RGB = np.asarray(pil_image("RGB", 6, 5, "random"))


def capsule_name(capsule: object) -> str:
    return repr(capsule).split('"')[1]


# ----- the module -----


def test_exports():
    assert dataloader_rs.transforms is T
    assert T.Image is Image
    assert T.ImageCollator is ImageCollator
    for name in T.__all__:
        assert getattr(T, name) is getattr(dataloader_rs._native, name)
    assert {"Image", "ImageBatch", "ImageCollator", "transforms"} <= set(dataloader_rs.__all__)


def test_every_transform_class_of_the_extension_is_exported():
    # The extension's registration is the one list of transform classes: transforms.py (its
    # imports and __all__, which ruff keeps equal), _native.pyi (stubtest) and this test follow it.
    native = dataloader_rs._native
    image_types = {native.Image, native.ImageBatch, native.ImageCollator}
    registered = {
        name
        for name, obj in vars(native).items()
        if isinstance(obj, type) and (issubclass(obj, native.Transform) or obj in image_types)
    }
    assert registered == set(T.__all__)


def test_every_transform_is_a_frozen_transform():
    transforms = [
        T.Decode(),
        T.ToRgb(),
        T.ToRgba(),
        T.ToGray(),
        T.Crop(0, 0, 1, 1),
        T.CenterCrop(3),
        T.Pad(1),
        T.PadTo(4, 4),
        T.Resize(4),
        T.HFlip(),
        T.VFlip(),
        T.Rotate90(),
        T.ToFloat(),
        T.Normalize([0.5], [0.5]),
        T.ToChw(),
        T.ToHwc(),
        T.Compose([]),
    ]
    for t in transforms:
        assert isinstance(t, T.Transform)
        with pytest.raises(AttributeError):
            t.anything = 1
    with pytest.raises(TypeError):
        T.Transform()


@pytest.mark.parametrize(
    ("transform", "text"),
    [
        (T.Decode(), "Decode(max_width=16384, max_height=16384, max_alloc=268435456)"),
        (
            T.Decode(max_width=100, max_height=50, max_alloc=1000),
            "Decode(max_width=100, max_height=50, max_alloc=1000)",
        ),
        (
            T.Decode(draft=(224, 100)),
            "Decode(max_width=16384, max_height=16384, max_alloc=268435456, draft=(224, 100))",
        ),
        (T.Decode(draft=64), "Decode(max_width=16384, max_height=16384, max_alloc=268435456, draft=(64, 64))"),
        (T.Decode(draft="auto"), "Decode(max_width=16384, max_height=16384, max_alloc=268435456, draft='auto')"),
        (T.ToRgb(), "ToRgb()"),
        (T.Crop(-1, 2, 3, 4), "Crop(top=-1, left=2, height=3, width=4)"),
        (T.CenterCrop(224), "CenterCrop(size=224)"),
        (T.CenterCrop((3, 4)), "CenterCrop(size=(3, 4))"),
        (T.CenterCrop([5]), "CenterCrop(size=5)"),
        (T.Pad(2), 'Pad(padding=(2, 2, 2, 2), fill=0.0, padding_mode="constant")'),
        (
            T.Pad((1, 2), fill=(1, 2, 3), padding_mode="reflect"),
            'Pad(padding=(1, 2, 1, 2), fill=[1.0, 2.0, 3.0], padding_mode="reflect")',
        ),
        (T.PadTo(224, 100), 'PadTo(width=224, height=100, fill=0.0, anchor="top_left")'),
        (T.Resize(256), 'Resize(size=256, interpolation="bilinear", max_size=None, antialias=True)'),
        (
            T.Resize((20, 30), interpolation="lanczos3", antialias=False),
            'Resize(size=(20, 30), interpolation="lanczos3", max_size=None, antialias=False)',
        ),
        (T.Resize(10, max_size=20), 'Resize(size=10, interpolation="bilinear", max_size=20, antialias=True)'),
        (T.Rotate90(), "Rotate90(k=1)"),
        (T.Rotate90(-3), "Rotate90(k=-3)"),
        (T.ToFloat(), "ToFloat(scale=True)"),
        (T.ToFloat(scale=False), "ToFloat(scale=False)"),
        (T.Normalize([0.5, 0.25], [0.1, 2]), "Normalize(mean=[0.5, 0.25], std=[0.1, 2.0])"),
        (
            T.Compose([T.Decode(max_alloc=10), T.ToChw()]),
            "Compose([Decode(max_width=16384, max_height=16384, max_alloc=10), ToChw()])",
        ),
    ],
)
def test_repr(transform, text):
    assert repr(transform) == text


@pytest.mark.parametrize(
    ("cls", "required"),
    [
        (T.Decode, ()),
        (T.Pad, (2,)),
        (T.PadTo, (8, 6)),
        (T.Resize, (10,)),
        (T.Rotate90, ()),
        (T.ToFloat, ()),
        (ImageCollator, ()),
    ],
)
def test_signature_shows_the_real_defaults(cls, required):
    # The defaults the signature shows (and _native.pyi repeats; stubtest compares the two) are
    # those an omitted argument gets: passing them explicitly changes nothing.
    params = inspect.signature(cls).parameters.values()
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    assert defaults
    assert repr(cls(*required, **defaults)) == repr(cls(*required))


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: T.Decode(max_width=0), ValueError, "Decode: max_width must be between 1 and 16384, got 0"),
        (lambda: T.Decode(max_height=16385), ValueError, "max_height must be between 1 and 16384"),
        (lambda: T.Decode(max_alloc=(256 << 20) + 1), ValueError, "max_alloc must be between 1 and 268435456"),
        (lambda: T.Decode(max_width="10"), TypeError, "Decode: max_width must be an int, got '10' (str)"),
        (lambda: T.Decode(max_width=True), TypeError, "max_width must be an int"),
        (lambda: T.Decode(max_width=10.0), TypeError, "max_width must be an int"),
        (lambda: T.Decode(draft=0), ValueError, "Decode: draft must be between 1 and 16384, got 0"),
        (lambda: T.Decode(draft="fast"), ValueError, "Decode: draft must be None, 'auto', an int or (width, height)"),
        (lambda: T.Decode(draft=(1, 2, 3)), ValueError, "draft must be an int or a sequence of 2 ints (width, height)"),
        (lambda: T.Decode(draft=(224.0, 224)), TypeError, "Decode: draft must be an int, got 224.0 (float)"),
        (lambda: T.Crop(0, 0, 0, 5), ValueError, "Crop: height must be between 1 and 16384, got 0"),
        (lambda: T.Crop(0.5, 0, 1, 1), TypeError, "Crop: top must be an int"),
        (lambda: T.CenterCrop(0), ValueError, "CenterCrop: size must be between 1"),
        (lambda: T.CenterCrop((1, 2, 3)), ValueError, "sequence of 1 or 2 ints (height, width), got 3 values"),
        (lambda: T.CenterCrop("224"), TypeError, "CenterCrop: size must be an int"),
        (lambda: T.Pad(-1), ValueError, "Pad: padding must be between 0 and 16384, got -1"),
        (lambda: T.Pad((1, 2, 3)), ValueError, "sequence of 1, 2 or 4 ints, got 3 values"),
        (
            lambda: T.Pad(1, padding_mode="wrap"),
            ValueError,
            'padding_mode "wrap" is not one of constant, edge, reflect, symmetric',
        ),
        (lambda: T.Pad(1, padding_mode=3), TypeError, "Pad: padding_mode must be a str"),
        (lambda: T.Pad(1, fill="red"), TypeError, "Pad: fill must be a number"),
        (lambda: T.Pad(1, fill=(1, 2, 3, 4, 5)), ValueError, "fill must be a number or a sequence of 1 to 4 numbers"),
        (lambda: T.PadTo(0, 5), ValueError, "PadTo: width must be between 1 and 16384, got 0"),
        (lambda: T.PadTo(5, 5, anchor="middle"), ValueError, 'anchor "middle" is not "top_left" or "center"'),
        (lambda: T.Resize(0), ValueError, "Resize: size must be between 1"),
        (lambda: T.Resize(10, interpolation="area"), ValueError, 'interpolation "area" is not one of nearest'),
        (lambda: T.Resize((10, 10), max_size=20), ValueError, "max_size is only allowed when size is the length"),
        (lambda: T.Resize(10, max_size=10), ValueError, "max_size = 10 must be strictly greater"),
        (lambda: T.Resize(10, antialias=1), TypeError, "Resize: antialias must be True or False, got 1 (int)"),
        (lambda: T.Rotate90(1.5), TypeError, "Rotate90: k must be an int"),
        (
            lambda: T.Rotate90(10**20),
            ValueError,
            "Rotate90: k must be between -9223372036854775808 and 9223372036854775807, got 1" + "0" * 20,
        ),
        (lambda: T.Rotate90(-(2**63) - 1), ValueError, "Rotate90: k must be between -9223372036854775808 and"),
        (lambda: T.ImageCollator(buffers=2**63), ValueError, "buffers must be between 0 and 9223372036854775807"),
        (lambda: T.ToFloat(scale="yes"), TypeError, "ToFloat: scale must be True or False"),
        (
            lambda: T.Normalize([0.5], [0.5, 0.5]),
            ValueError,
            "mean and std need the same, non-zero number of values, got 1 and 2",
        ),
        (lambda: T.Normalize([], []), ValueError, "non-zero number of values"),
        (lambda: T.Normalize([0.5], [0]), ValueError, "division by zero"),
        (lambda: T.Normalize(["a"], [1]), TypeError, "Normalize: mean must be a number"),
        (lambda: T.Compose([T.ToRgb(), lambda x: x]), TypeError, "Compose: transform 1 is <function"),
        (
            lambda: T.Compose(T.ToRgb()),
            TypeError,
            "Compose takes a list of dataloader_rs.transforms objects, got ToRgb",
        ),
        (lambda: T.Compose(3), TypeError, "Compose takes a list"),
    ],
)
def test_constructor_errors(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert message in str(info.value)


def test_interpolation_accepts_an_enum_with_a_value():
    class Mode:
        value = "bicubic"

    assert "bicubic" in repr(T.Resize(4, interpolation=Mode()))


# ----- calls -----


def test_call_takes_bytes_bytearray_memoryview_image_and_arrays():
    decode = T.Decode()
    for data in (PNG, bytearray(PNG), memoryview(PNG)):
        assert_matches(decode(data), RGB)
    image = decode(PNG)
    flipped = T.HFlip()(image)
    assert_matches(flipped, RGB[:, ::-1])
    assert_matches(image, RGB)  # the input is not changed
    assert_matches(T.HFlip()(RGB), RGB[:, ::-1])
    assert_matches(T.HFlip()(memoryview(RGB.tobytes()).cast("B", RGB.shape)), RGB[:, ::-1])


def test_call_errors():
    with pytest.raises(TypeError, match="takes encoded bytes, an Image or an array, got str"):
        T.Decode()("image.png")
    with pytest.raises(TypeError, match="got tuple"):
        T.ToRgb()((PNG, 1))
    with pytest.raises(ValueError, match="Decode expects encoded bytes, got a uint8 HWC image of 6x5x3"):
        T.Decode()(RGB)
    with pytest.raises(ValueError, match=r"ToRgb expects a decoded image \(put Decode first\), got \d+ bytes"):
        T.ToRgb()(PNG)
    with pytest.raises(ValueError, match=r"Normalize expects a float32 image \(apply ToFloat first\), got a uint8"):
        T.Compose([T.Decode(), T.Normalize([0.5], [0.5])])(PNG)
    with pytest.raises(ValueError, match=r"Image\.from_array takes an array of shape"):
        T.ToRgb()(np.zeros(10, np.uint8))


def test_compose_of_nothing_returns_its_input():
    assert T.Compose([])(PNG) == PNG
    assert T.Compose([T.Compose([T.Decode()]), T.Compose([])]).transforms[1].transforms == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not an image at all", r"unknown image format \(first bytes: \[6e, 6f, 74, 20, 61, 6e, 20, 69\]\)"),
        (PNG[: len(PNG) // 2], "truncated PNG image"),
        (PNG[:8] + b"\x00" * 40, "PNG image"),
        (b"", "unknown image format"),
        (encode(pil_image("RGB", 20, 20), "JPEG")[:200], "JPEG image"),
        (encode(pil_image("RGB", 20, 20), "BMP")[:60], "BMP image"),
    ],
)
def test_undecodable_images_say_why(data, message):
    with pytest.raises(ValueError, match=message):
        T.Decode()(data)


def test_limits_are_checked_from_the_header():
    wide = encode(pil_image("L", 3, 200), "PNG")
    with pytest.raises(ValueError, match="image of 200x3 pixels exceeds the limit of 100x16384"):
        T.Decode(max_width=100)(wide)
    with pytest.raises(ValueError, match=r"image of 200x3 pixels needs \d+ bytes, above the limit of 599 bytes"):
        T.Decode(max_alloc=599)(wide)
    # A 16384 x 16384 RGBA header: 1 GiB, refused before any pixel is decoded.
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", 16384, 16384, 8, 6, 0, 0, 0)
    bomb = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    with pytest.raises(ValueError, match="needs 1073741824 bytes, above the limit of 268435456 bytes"):
        T.Decode()(bomb)


def test_to_float_checks_the_size_limit_of_its_output():
    # 8192 x 8193 grey is 64 MiB; as float32 it would be just above the 256 MiB of any image.
    grey = Image.from_array(np.zeros((8192, 8193), np.uint8))
    with pytest.raises(ValueError, match="needs 268468224 bytes, above the limit of 268435456 bytes"):
        T.ToFloat()(grey)
    with pytest.raises(ValueError, match="needs 268468224 bytes"):
        T.Compose([T.ToFloat(), T.Normalize([0.5], [0.5])])(grey)
    small = T.ToFloat()(Image.from_array(np.zeros((2, 3), np.uint8)))
    assert np.asarray(small).dtype == np.float32


def test_transforms_release_the_interpreter():
    """While a transform runs on one thread, another thread runs Python (the switch interval is
    made so long that only an explicit release of the interpreter lets it)."""
    data = encode(pil_image("RGB", 512, 512, "random"), "PNG")
    chain = T.Compose([T.Decode(), T.Resize(100), T.ToFloat()])
    state = {"inside": False, "seen": False}

    def work():
        state["inside"] = True
        chain(data)
        state["inside"] = False

    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        # A busy machine may not run this thread at all while one transform runs, so a few
        # tries; a transform that keeps the interpreter lets it run in none of them.
        for _ in range(20):
            thread = threading.Thread(target=work)
            thread.start()
            while thread.is_alive() and not state["seen"]:
                state["seen"] = state["inside"]
            thread.join()
            if state["seen"]:
                break
    finally:
        sys.setswitchinterval(old)
    assert state["seen"]


# ----- Image -----


def test_image_is_a_read_only_zero_copy_view():
    image = T.Decode()(PNG)
    assert (image.shape, image.dtype, image.layout) == ((6, 5, 3), "uint8", "hwc")
    assert (image.height, image.width, image.channels, image.nbytes) == (6, 5, 3, 90)
    assert repr(image) == "Image(shape=(6, 5, 3), dtype=uint8, layout=hwc)"
    a, b = np.asarray(image), np.asarray(image)
    assert a.flags.c_contiguous
    assert not a.flags.writeable
    assert np.shares_memory(a, b)
    with pytest.raises(ValueError):
        a[0, 0, 0] = 1
    view = memoryview(image)
    assert (view.readonly, view.format, view.shape, view.strides) == (True, "B", (6, 5, 3), (15, 3, 1))
    with pytest.raises(TypeError, match="must be read-write"):
        io.BytesIO(b"xy").readinto(image)  # asks for a writable buffer: refused
    view.release()


def test_float_chw_image_buffer():
    image = T.Compose([T.ToFloat(), T.ToChw()])(RGB)
    assert (image.shape, image.dtype, image.layout) == ((3, 6, 5), "float32", "chw")
    view = memoryview(image)
    assert (view.format, view.itemsize, view.strides) == ("f", 4, (120, 20, 4))
    assert_matches(image, np.ascontiguousarray((RGB.astype(np.float32) / np.float32(255)).transpose(2, 0, 1)))


def test_views_keep_the_image_alive():
    a = np.asarray(T.Decode()(PNG))
    view = memoryview(T.Decode()(PNG))
    capsule = T.Decode()(PNG).__dlpack__()
    gc.collect()
    assert_matches(a, RGB)
    assert bytes(view) == RGB.tobytes()
    assert_matches(np.from_dlpack(_Holder(capsule)), RGB)


class _Holder:
    """A producer handing out a capsule made earlier (the capsule alone keeps the data)."""

    def __init__(self, capsule: object) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_: object) -> object:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def test_image_dlpack():
    image = T.Decode()(PNG)
    assert image.__dlpack_device__() == (1, 0)
    assert capsule_name(image.__dlpack__()) == "dltensor"
    assert capsule_name(image.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(image.__dlpack__(max_version=(0, 8))) == "dltensor"
    a = np.from_dlpack(image)
    assert not a.flags.writeable  # the versioned capsule says read-only
    assert np.shares_memory(a, np.asarray(image))
    copied = np.from_dlpack(image, copy=True)
    assert copied.flags.writeable
    assert not np.shares_memory(copied, a)
    assert_matches(copied, RGB)
    with pytest.raises(BufferError, match="cannot be exported to device"):
        image.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream must be None"):
        image.__dlpack__(stream=1)
    with pytest.raises(TypeError, match="max_version must be"):
        image.__dlpack__(max_version="1.0")
    gc.collect()


def test_torch_from_dlpack_is_a_view():
    torch = pytest.importorskip("torch")
    image = T.Decode()(PNG)
    t = torch.from_dlpack(image)
    assert t.shape == (6, 5, 3)
    assert t.dtype == torch.uint8
    assert t.data_ptr() == np.asarray(image).ctypes.data
    chw = t.permute(2, 0, 1)
    back = Image.from_array(chw, layout="chw")
    assert_matches(back, RGB)
    assert_matches(Image.from_array(torch.zeros(4, 3, dtype=torch.float32)), np.zeros((4, 3, 1), np.float32))
    with pytest.raises(TypeError, match="float64"):
        Image.from_array(torch.zeros(4, 3, dtype=torch.float64))


# ----- Image.from_array -----


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.bool_, np.float16, np.int8, np.uint16])
def test_from_array_refuses_other_types(dtype):
    with pytest.raises(TypeError, match="takes uint8 or float32 values, got"):
        Image.from_array(np.zeros((4, 4, 3), dtype))


def test_from_array_does_not_convert_python_lists():
    with pytest.raises(TypeError, match="got float64"):
        Image.from_array([[0.5, 0.25]])
    assert Image.from_array(np.array([[1, 2]], np.uint8)).shape == (1, 2, 1)


@pytest.mark.parametrize(
    ("shape", "layout", "message"),
    [
        ((4,), "hwc", r"shape \(height, width\) or \(height, width, channels\), got shape \(4,\)"),
        ((1, 2, 3, 4), "chw", r"\(channels, height, width\), got shape \(1, 2, 3, 4\)"),
        ((4, 4, 2), "hwc", "takes 1, 3 or 4 channels, got 2"),
        ((4, 4, 5), "hwc", "got 5"),
        ((3, 4, 5), "hwc", 'channels first\\? pass layout="chw"'),
        ((5, 4, 3), "chw", 'channels last\\? pass layout="hwc"'),
        ((0, 4, 3), "hwc", "empty image of 0x4"),
        ((16385, 1), "hwc", "image of 1x16385 pixels exceeds the limit of 16384x16384"),
    ],
)
def test_from_array_shapes(shape, layout, message):
    with pytest.raises(ValueError, match=message):
        Image.from_array(np.zeros(shape, np.uint8), layout=layout)


def test_from_array_refuses_over_256_mib_before_copying():
    huge = np.broadcast_to(np.float32(0), (16384, 16384, 1))  # 1 GiB, no memory behind it
    with pytest.raises(ValueError, match="needs 1073741824 bytes, above the limit of 268435456 bytes"):
        Image.from_array(huge)


def test_from_array_layouts_and_strides():
    chw = np.ascontiguousarray(RGB.transpose(2, 0, 1))
    assert_matches(Image.from_array(chw, layout="chw"), RGB)
    assert Image.from_array(chw, layout="chw").layout == "hwc"
    assert_matches(Image.from_array(RGB[1:5:2, ::-1]), RGB[1:5:2, ::-1])
    assert_matches(Image.from_array(RGB[:, :, 0]), RGB[:, :, :1])
    assert_matches(Image.from_array(Image.from_array(RGB)), RGB)
    with pytest.raises(ValueError, match='layout must be "hwc" or "chw"'):
        Image.from_array(RGB, layout="whc")


def test_from_array_copies():
    a = RGB.copy()
    image = Image.from_array(a)
    a[:] = 0
    assert_matches(image, RGB)


def test_from_array_refuses_gpu_data():
    class GpuTensor:
        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(
        TypeError, match=r"takes data in CPU memory, got a GpuTensor on DLPack device \(2, 0\): move it with .cpu\(\)"
    ):
        Image.from_array(GpuTensor())


def test_from_array_without_numpy_reads_buffers():
    code = """
import sys
sys.modules["numpy"] = None
import array
from dataloader_rs import Image
from dataloader_rs import transforms as T
raw = bytes(range(24))
im = Image.from_array(memoryview(raw).cast("B", (2, 4, 3)))
assert im.shape == (2, 4, 3) and bytes(memoryview(im)) == raw, im
im = Image.from_array(memoryview(raw).cast("B", (4, 6)))
assert im.shape == (4, 6, 1)
f = Image.from_array(memoryview(array.array("f", [0.5] * 12)).cast("B").cast("f", (2, 2, 3)))
assert f.dtype == "float32" and memoryview(f).tolist()[1][1] == [0.5, 0.5, 0.5]
strided = memoryview(raw).cast("B", (4, 2, 3))[::2]
assert not strided.c_contiguous
assert bytes(memoryview(Image.from_array(strided))) == raw[0:6] + raw[12:18]
for bad, err in [("layout", ValueError), ("double", TypeError), ("object", TypeError)]:
    try:
        if bad == "layout":
            Image.from_array(memoryview(raw).cast("B", (3, 2, 4)), layout="chw")
        elif bad == "double":
            Image.from_array(memoryview(array.array("d", [0.0] * 6)).cast("B").cast("d", (2, 3)))
        else:
            Image.from_array(object())
    except err as e:
        print(type(e).__name__, e)
    else:
        raise AssertionError(bad)
assert T.HFlip()(memoryview(raw).cast("B", (2, 4, 3))).shape == (2, 4, 3)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == 'ValueError Image.from_array without numpy reads buffers as "hwc" only'
    assert lines[1].startswith('TypeError Image.from_array takes uint8 or float32 values, got buffer format "d"')
    assert lines[2].startswith("TypeError Image.from_array takes a numpy array, a CPU tensor, or (without numpy)")


# ----- ImageCollator and ImageBatch -----


def images(n: int = 3, shape=(4, 5, 3), dtype=np.uint8) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    if dtype == np.uint8:
        return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def test_collator_arguments():
    assert repr(ImageCollator()) == 'ImageCollator(layout="NCHW", dtype=None, buffers=0)'
    c = ImageCollator("NHWC", "float32", 4)
    assert (c.layout, c.dtype, c.buffers, c.pooled) == ("NHWC", "float32", 4, 0)
    assert ImageCollator(dtype=np.uint8).dtype == "uint8"
    assert ImageCollator(dtype=np.dtype("float32")).dtype == "float32"
    with pytest.raises(ValueError, match='layout "nchw" is not "NCHW" or "NHWC"'):
        ImageCollator("nchw")
    with pytest.raises(TypeError, match="layout must be"):
        ImageCollator(3)
    with pytest.raises(ValueError, match='dtype must be "uint8", "float32" or None, got "int8"'):
        ImageCollator(dtype="int8")
    with pytest.raises(TypeError, match="dtype must be"):
        ImageCollator(dtype=5)
    with pytest.raises(ValueError, match="buffers must be at least 0, got -1"):
        ImageCollator(buffers=-1)
    with pytest.raises(TypeError, match="buffers must be an int"):
        ImageCollator(buffers=1.5)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_nchw_and_nhwc(dtype):
    arrays = images(3, dtype=dtype)
    batch = ImageCollator()([Image.from_array(a) for a in arrays])
    assert isinstance(batch, ImageBatch)
    assert (batch.shape, batch.dtype, batch.layout, len(batch)) == ((3, 3, 4, 5), np.dtype(dtype).name, "NCHW", 3)
    assert batch.nbytes == 3 * 60 * np.dtype(dtype).itemsize
    assert repr(batch) == f"ImageBatch(shape=(3, 3, 4, 5), dtype={np.dtype(dtype).name}, layout=NCHW)"
    assert_matches(batch, np.stack(arrays).transpose(0, 3, 1, 2).copy())
    nhwc = ImageCollator("NHWC")(Image.from_array(a) for a in arrays)
    assert_matches(nhwc, np.stack(arrays))
    chw_images = [T.ToChw()(a) for a in arrays]
    assert_matches(ImageCollator("NHWC")(chw_images), np.stack(arrays))
    assert_matches(ImageCollator()(chw_images), np.stack(arrays).transpose(0, 3, 1, 2).copy())


def test_metadata_pairs():
    arrays = images(2)
    batch, meta = ImageCollator()([(Image.from_array(a), {"i": i}) for i, a in enumerate(arrays)])
    assert meta == [{"i": 0}, {"i": 1}]
    assert_matches(batch, np.stack(arrays).transpose(0, 3, 1, 2).copy())


def test_collation_errors():
    c = ImageCollator()
    a, b = Image.from_array(np.zeros((4, 5, 3), np.uint8)), Image.from_array(np.zeros((4, 6, 3), np.uint8))
    with pytest.raises(
        ValueError, match=r"image 1 of the batch is 4x6x3 \(height x width x channels\), the first one is 4x5x3"
    ):
        c([a, b])
    f = Image.from_array(np.zeros((4, 5, 3), np.float32))
    with pytest.raises(ValueError, match="image 1 of the batch is float32, expected uint8"):
        c([a, f])
    with pytest.raises(ValueError, match="image 0 of the batch is uint8, expected float32"):
        ImageCollator(dtype="float32")([a])
    with pytest.raises(ValueError, match="cannot collate an empty batch"):
        c([])
    with pytest.raises(TypeError, match="item 1 of the batch is ndarray"):
        c([a, np.zeros((4, 5, 3), np.uint8)])
    with pytest.raises(TypeError, match="mixes Image objects and"):
        c([a, (a, 1)])
    with pytest.raises(TypeError, match="mixes Image objects and"):
        c([(a, 1), a])


def test_batch_views_are_writable_and_shared():
    batch = ImageCollator()([Image.from_array(a) for a in images(2)])
    a = np.asarray(batch)
    assert a.flags.writeable
    assert a.flags.c_contiguous
    d = np.from_dlpack(batch)
    assert d.flags.writeable
    assert np.shares_memory(a, d)
    a[1, 2, 3, 4] = 77
    assert d[1, 2, 3, 4] == 77
    assert memoryview(batch).readonly is False
    ctypes.c_char.from_buffer(batch)  # a writable export
    assert batch.__dlpack_device__() == (1, 0)
    assert capsule_name(batch.__dlpack__()) == "dltensor"
    assert capsule_name(batch.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    copied = np.from_dlpack(batch, copy=True)
    copied[0, 0, 0, 0] = 5
    assert a[0, 0, 0, 0] != 5 or not np.shares_memory(copied, a)


def test_batch_views_keep_the_buffer_alive():
    arrays = images(2, dtype=np.float32)
    c = ImageCollator(buffers=2)
    batch = c([Image.from_array(x) for x in arrays])
    view = np.from_dlpack(batch)
    del batch
    gc.collect()
    assert c.pooled == 0  # the view holds the buffer
    assert_matches(view, np.stack(arrays).transpose(0, 3, 1, 2).copy())
    del view
    gc.collect()
    assert c.pooled == 1


def test_buffers_of_dropped_batches_are_reused_without_waiting():
    c = ImageCollator(buffers=1)
    items = [Image.from_array(x) for x in images(4)]
    first = c(items)
    address = np.asarray(first).ctypes.data
    held = c(items)  # the first batch is alive: a new buffer, no wait
    assert np.asarray(held).ctypes.data != address
    del first
    gc.collect()
    assert c.pooled == 1
    again = c(items[::-1])
    assert np.asarray(again).ctypes.data == address
    assert_matches(again, np.stack([np.asarray(i) for i in items[::-1]]).transpose(0, 3, 1, 2).copy())
    del held, again
    gc.collect()
    assert c.pooled == 1  # at most `buffers` are kept


def test_torch_views_of_batches():
    torch = pytest.importorskip("torch")
    c = ImageCollator(buffers=1)
    batch = c([Image.from_array(x) for x in images(2, dtype=np.float32)])
    t = torch.from_dlpack(batch)
    assert t.shape == (2, 3, 4, 5)
    assert t.dtype == torch.float32
    t[0, 0, 0, 0] = 42.0
    assert np.asarray(batch)[0, 0, 0, 0] == 42.0
    del batch
    gc.collect()
    # The consumer's deleter runs on another thread, without the interpreter's help.
    holder = [t]
    thread = threading.Thread(target=holder.clear)
    thread.start()
    thread.join()
    del t
    gc.collect()
    assert c.pooled == 1


def test_transforms_and_collator_shared_by_threads():
    chain = T.Compose([T.Decode(), T.ToFloat(), T.ToChw()])
    collator = ImageCollator(buffers=2)
    blobs = [encode(pil_image("RGB", 6, 5, "random", seed=i), "PNG") for i in range(8)]
    expected = np.stack([np.asarray(pil_image("RGB", 6, 5, "random", seed=i)) for i in range(8)])
    expected = np.ascontiguousarray(expected.transpose(0, 3, 1, 2)).astype(np.float32) / np.float32(255)
    errors = []

    def work() -> None:
        try:
            for _ in range(20):
                batch = collator([chain(b) for b in blobs])
                assert_matches(batch, expected)
        except AssertionError as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert collator.pooled <= 2
