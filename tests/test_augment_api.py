"""The random transforms' Python surface: torchvision's arguments and defaults, the errors it
raises for bad ones (ValueError or TypeError, saying why), reprs, and ``params``."""

from __future__ import annotations

import inspect

import pytest

from dataloader_rs import transforms as T

RANDOM = [
    (T.RandomResizedCrop, (10,)),
    (T.RandomCrop, (8,)),
    (T.RandomHorizontalFlip, ()),
    (T.RandomVerticalFlip, ()),
    (T.RandomErasing, ()),
    (T.RandomApply, ([T.RandomHorizontalFlip()],)),
    (T.ColorJitter, ()),
    (T.RandomGrayscale, ()),
    (T.TrivialAugmentWide, ()),
]


@pytest.mark.parametrize(("cls", "required"), RANDOM, ids=lambda v: getattr(v, "__name__", ""))
def test_signature_shows_the_real_defaults(cls, required):
    params = inspect.signature(cls).parameters.values()
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    assert defaults
    assert repr(cls(*required, **defaults)) == repr(cls(*required))
    t = cls(*required)
    assert isinstance(t, T.RandomTransform)
    assert isinstance(t, T.Transform)


@pytest.mark.parametrize(
    ("transform", "text"),
    [
        (
            T.RandomResizedCrop(224),
            "RandomResizedCrop(size=(224, 224), scale=(0.08, 1.0), ratio=(0.75, 1.3333333333333333), "
            'interpolation="bilinear", antialias=True)',
        ),
        (
            T.RandomCrop((32, 16), padding=[1, 2], fill=[1, 2, 3], padding_mode="edge"),
            "RandomCrop(size=(32, 16), padding=(1, 2, 1, 2), pad_if_needed=False, fill=[1.0, 2.0, 3.0], "
            'padding_mode="edge")',
        ),
        (T.RandomHorizontalFlip(0.25), "RandomHorizontalFlip(p=0.25)"),
        (T.RandomVerticalFlip(), "RandomVerticalFlip(p=0.5)"),
        (
            T.RandomErasing(value="random"),
            "RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value='random')",
        ),
        (
            T.RandomApply([T.HFlip(), T.RandomVerticalFlip()], p=0.1),
            "RandomApply([HFlip(), RandomVerticalFlip(p=0.5)], p=0.1)",
        ),
    ],
)
def test_repr(transform, text):
    assert repr(transform) == text


def test_interpolation_modes_and_antialias():
    tv = pytest.importorskip("torchvision.transforms.v2")
    t = T.RandomResizedCrop(8, interpolation=tv.InterpolationMode.NEAREST_EXACT, antialias=False)
    assert 'interpolation="nearest-exact", antialias=False' in repr(t)
    # An explicit None is an omitted argument, as everywhere in dataloader_rs.transforms.
    assert repr(T.RandomResizedCrop(8, antialias=None)) == repr(T.RandomResizedCrop(8))


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: T.RandomResizedCrop(0), ValueError, "RandomResizedCrop: size must be between 1 and 16384, got 0"),
        (lambda: T.RandomResizedCrop((1, 2, 3)), ValueError, "sequence of 1 or 2 ints"),
        (lambda: T.RandomResizedCrop("224"), TypeError, "size must be an int"),
        (lambda: T.RandomResizedCrop(8, scale=0.5), TypeError, "scale should be a sequence of two numbers"),
        (lambda: T.RandomResizedCrop(8, ratio=(1.0,)), TypeError, "ratio should be a sequence of two numbers"),
        (lambda: T.RandomResizedCrop(8, scale=(0.9, 0.1)), ValueError, r"scale should be of kind \(min, max\)"),
        (lambda: T.RandomResizedCrop(8, ratio=(0.0, 1.0)), ValueError, "ratio should be between"),
        (lambda: T.RandomResizedCrop(8, scale=("a", 1)), TypeError, "scale must be a number"),
        (lambda: T.RandomResizedCrop(8, interpolation="box"), ValueError, "box and hamming are for PIL images"),
        (lambda: T.RandomResizedCrop(8, interpolation=3), TypeError, "interpolation must be a str"),
        (lambda: T.RandomResizedCrop(8, interpolation="lanczos", antialias=False), ValueError, "lanczos requires"),
        (lambda: T.RandomResizedCrop(8, antialias=1), TypeError, "antialias must be True or False"),
        (lambda: T.RandomCrop(8, padding=[1, 2, 3]), ValueError, "padding must be an int or a sequence of 1, 2 or 4"),
        (lambda: T.RandomCrop(8, padding=-1), ValueError, "padding must be between 0"),
        (lambda: T.RandomCrop(8, padding_mode="wrap"), ValueError, "padding_mode should be either constant, edge"),
        (lambda: T.RandomCrop(8, pad_if_needed=1), TypeError, "pad_if_needed must be True or False"),
        (lambda: T.RandomCrop(8, fill="x"), TypeError, "fill must be a number"),
        (
            lambda: T.RandomHorizontalFlip(1.5),
            ValueError,
            r"p should be a floating point value in the interval \[0.0, 1.0\]",
        ),
        (lambda: T.RandomVerticalFlip(-0.1), ValueError, "interval"),
        (lambda: T.RandomHorizontalFlip("0.5"), TypeError, "p must be a number"),
        (lambda: T.RandomErasing(scale=(0.1, 1.5)), ValueError, "scale should be between 0 and 1"),
        (lambda: T.RandomErasing(value="noise"), ValueError, "it should be 'random'"),
        (lambda: T.RandomErasing(value=b"1"), TypeError, "value must be a number"),
        (lambda: T.RandomErasing(value=float("nan")), ValueError, "value must be finite"),
        (lambda: T.RandomApply([]), ValueError, "pass at least one transform"),
        (lambda: T.RandomApply(T.HFlip()), TypeError, "RandomApply takes a list"),
        (lambda: T.RandomApply([lambda x: x]), TypeError, "transform 0 is"),
    ],
)
def test_bad_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_params_and_seed_arguments():
    t = T.RandomResizedCrop(8)
    with pytest.raises(TypeError):
        t.params(10, 10)  # keyword-only
    with pytest.raises(ValueError, match="height must be between 1"):
        t.params(height=0, width=10, seed=1)
    with pytest.raises(TypeError, match=r"RandomResizedCrop: seed must be an int, got 1\.5"):
        t.params(height=10, width=10, seed=1.5)
    with pytest.raises(TypeError, match=r"seed must be an int"):
        t(b"", seed=True)
    assert not hasattr(T.Resize(8), "params")


def test_params_name_what_torchvision_names():
    keys = {
        T.RandomResizedCrop(8): {"top", "left", "height", "width"},
        T.RandomCrop(8, padding=1): {"top", "left", "height", "width", "padding"},
        T.RandomHorizontalFlip(): {"flip"},
        T.RandomVerticalFlip(): {"flip"},
        T.RandomErasing(): {"erase", "top", "left", "height", "width"},
        T.RandomApply([T.HFlip()]): {"apply"},
    }
    for t, expected in keys.items():
        p = t.params(height=20, width=30, seed=3)
        assert set(p) == expected, t
        assert all(type(v) in (int, bool, list) for v in p.values()), p


def test_transforms_that_need_uint8_say_so():
    t = T.RandomResizedCrop(8)
    image = T.ToFloat()(T.Image.from_array(__import__("numpy").zeros((4, 4, 3), "uint8")))
    with pytest.raises(ValueError, match="RandomResizedCrop expects a uint8 HWC image"):
        t(image, seed=0)
    with pytest.raises(ValueError, match=r"RandomHorizontalFlip expects a decoded image \(put Decode first\)"):
        T.RandomHorizontalFlip()(b"\x89PNG", seed=0)


def test_color_jitter_arguments_as_torchvision_reads_them():
    assert repr(T.ColorJitter()) == "ColorJitter(brightness=None, contrast=None, saturation=None, hue=None)"
    assert (
        repr(T.ColorJitter(0.4, 1.5, (0.2, 0.3), 0.1))
        == "ColorJitter(brightness=(0.6, 1.4), contrast=(0.0, 2.5), saturation=(0.2, 0.3), hue=(-0.1, 0.1))"
    )
    assert repr(T.ColorJitter(brightness=(1, 1), hue=(0, 0))) == repr(T.ColorJitter())
    assert repr(T.RandomGrayscale()) == "RandomGrayscale(p=0.1)"
    p = T.ColorJitter(brightness=0.5).params(height=4, width=4, seed=1)
    assert set(p) == {"order", "brightness", "contrast", "saturation", "hue"}
    assert p["contrast"] is None
    assert p["saturation"] is None
    assert p["hue"] is None
    assert 0.5 <= p["brightness"] <= 1.5


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"brightness": -0.1}, ValueError, "if brightness is a single number, it must be non negative"),
        ({"hue": 0.6}, ValueError, r"hue values should be between \(-0.5, 0.5\) and increasing"),
        ({"contrast": (1.5, 0.5)}, ValueError, "contrast values should be between"),
        ({"saturation": (0.1, 0.2, 0.3)}, TypeError, "should be a single number or a sequence with length 2"),
        ({"brightness": "0.4"}, TypeError, "should be a single number"),
        ({"hue": True}, TypeError, "should be a single number"),
    ],
)
def test_color_jitter_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        T.ColorJitter(**kwargs)


def test_colour_transforms_take_grey_and_rgb_only():
    import numpy as np

    rgba = np.zeros((2, 2, 4), np.uint8)
    for t in (T.ColorJitter(brightness=0.5), T.RandomGrayscale(p=1.0)):
        with pytest.raises(ValueError, match=r"expects an image of 1 or 3 channels \(apply ToRgb first\), got 4"):
            t(rgba, seed=0)


def test_trivial_augment_wide_arguments():
    assert (
        repr(T.TrivialAugmentWide()) == 'TrivialAugmentWide(num_magnitude_bins=31, interpolation="nearest", fill=None)'
    )
    t = T.TrivialAugmentWide(num_magnitude_bins=5, interpolation="bilinear", fill=[1, 2, 3])
    assert repr(t) == 'TrivialAugmentWide(num_magnitude_bins=5, interpolation="bilinear", fill=[1.0, 2.0, 3.0])'
    p = t.params(height=8, width=8, seed=0)
    assert set(p) == {"op", "magnitude"}
    assert isinstance(p["op"], str)
    assert isinstance(p["magnitude"], float)
    with pytest.raises(ValueError, match='interpolation "bicubic" is not one of nearest, bilinear'):
        T.TrivialAugmentWide(interpolation="bicubic")
    with pytest.raises(ValueError, match="num_magnitude_bins must be between 2"):
        T.TrivialAugmentWide(num_magnitude_bins=1)
    with pytest.raises(TypeError, match="num_magnitude_bins must be an int"):
        T.TrivialAugmentWide(num_magnitude_bins=3.0)
    import numpy as np

    # The fill is checked against the image whatever the operation drawn.
    with pytest.raises(ValueError, match="fill has 3 values for an image of 1 channels"):
        t(np.zeros((4, 4, 1), np.uint8), seed=0)


@pytest.mark.parametrize(("ratio", "box"), [((50, 60), (4, 0, 1, 10)), ((1 / 60, 1 / 50), (0, 4, 10, 1))])
def test_random_resized_crop_never_crops_nothing(ratio, box):
    # Ten misses, then the centred fallback, whose short side rounds to 0 for such a ratio:
    # one row (or column) of the image is kept and resized, never an empty crop of zeros.
    np = pytest.importorskip("numpy")
    a = (np.arange(100, dtype=np.uint8).reshape(10, 10, 1) + 100).repeat(3, axis=2)
    t = T.RandomResizedCrop(8, ratio=ratio)
    for seed in range(5):
        out = np.asarray(t(a, seed=seed))
        assert out.shape == (8, 8, 3)
        top, left, height, width = box
        assert t.params(height=10, width=10, seed=seed) == {"top": top, "left": left, "height": height, "width": width}
        crop = a[top : top + height, left : left + width]
        assert out.min() >= crop.min(), (out, crop)
        assert out.max() <= crop.max(), (out, crop)
