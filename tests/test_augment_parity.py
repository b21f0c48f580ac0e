"""The random transforms against ``torchvision.transforms.v2.functional`` on uint8 tensors: the
parameters an op reports (``op.params(height=, width=, seed=)``) given to torchvision's kernel
give the image the op made with that seed: bit for bit where torch computes in integers (crops,
pads, flips, erasing, posterize, solarize, equalize), within ``assert_near_torch``'s bound where
it computes in float32, whose rounding depends on the kernels torch picks for the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from parity import assert_matches, assert_near_torch, content, torch_kernels

from dataloader_rs import transforms as T

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.v2.functional")
InterpolationMode = pytest.importorskip("torchvision.transforms.v2").InterpolationMode

SEEDS = range(12)
SHAPES = [(37, 53, 3), (64, 48, 1), (23, 90, 4), (8, 8, 3)]


def chw(a: np.ndarray):
    """The HWC array as torchvision's CHW tensor (a view)."""
    return torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)


def hwc(t) -> np.ndarray:
    return np.ascontiguousarray(t.permute(1, 2, 0).numpy())


def image(shape: tuple[int, int, int], seed: int, kind: str = "random") -> np.ndarray:
    h, w, c = shape
    return content(h, w, c, kind, seed)


# ----- RandomResizedCrop: the crop, then torch's uint8 resize -----

MODES = [
    ("bilinear", True),
    ("bilinear", False),
    ("bicubic", True),
    ("bicubic", False),
    ("nearest", True),
    ("nearest-exact", True),
    ("lanczos", True),
]


@pytest.mark.parametrize(("interpolation", "antialias"), MODES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("size", [224, (17, 40), 5])
def test_random_resized_crop_is_resized_crop(interpolation, antialias, shape, size):
    t = T.RandomResizedCrop(size, interpolation=interpolation, antialias=antialias)
    out_hw = [size, size] if isinstance(size, int) else list(size)
    mode = InterpolationMode(interpolation)
    for seed in SEEDS:
        a = image(shape, seed, "random" if seed % 2 else "smooth")
        p = t.params(height=shape[0], width=shape[1], seed=seed)
        assert set(p) == {"top", "left", "height", "width"}
        theirs = F.resized_crop(chw(a), **p, size=out_hw, interpolation=mode, antialias=antialias)
        assert_near_torch(t(a, seed=seed), hwc(theirs))


def test_random_resized_crop_takes_torchvision_interpolation_modes():
    a = image((40, 60, 3), 1)
    ours = T.RandomResizedCrop(16, interpolation=InterpolationMode.BICUBIC)
    p = ours.params(height=40, width=60, seed=3)
    theirs = F.resized_crop(chw(a), **p, size=[16, 16], interpolation=InterpolationMode.BICUBIC)
    assert_near_torch(ours(a, seed=3), hwc(theirs))


# ----- RandomCrop: the padding, then the crop -----


@pytest.mark.parametrize("padding_mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize(
    ("size", "padding", "pad_if_needed"),
    [(16, None, False), ((20, 12), 4, False), (32, [1, 2], True), (40, [1, 2, 3, 4], True)],
)
def test_random_crop_is_pad_then_crop(size, padding, pad_if_needed, padding_mode):
    fill = 7 if padding_mode == "constant" else 0
    t = T.RandomCrop(size, padding=padding, pad_if_needed=pad_if_needed, fill=fill, padding_mode=padding_mode)
    for seed in SEEDS:
        a = image((30, 25, 3), seed)
        p = t.params(height=30, width=25, seed=seed)
        x = chw(a)
        if any(p["padding"]):
            x = F.pad(x, padding=p["padding"], fill=fill, padding_mode=padding_mode)
        theirs = F.crop(x, p["top"], p["left"], p["height"], p["width"])
        assert_matches(t(a, seed=seed), hwc(theirs))


def test_random_crop_larger_than_the_image_is_a_value_error():
    t = T.RandomCrop(40, padding=2)
    with pytest.raises(
        ValueError, match=r"Required crop size \(40, 40\) is larger than padded input image size \(34, 29\)"
    ):
        t(image((30, 25, 3), 0), seed=0)
    with pytest.raises(ValueError, match="Required crop size"):
        t.params(height=30, width=25, seed=0)


# ----- flips, erasing, RandomApply -----


@pytest.mark.parametrize(
    ("ours", "theirs"), [(T.RandomHorizontalFlip, F.horizontal_flip), (T.RandomVerticalFlip, F.vertical_flip)]
)
def test_flips(ours, theirs):
    t = ours()
    seen = set()
    for seed in range(40):
        a = image((9, 14, 3), seed)
        flip = t.params(height=9, width=14, seed=seed)["flip"]
        seen.add(flip)
        expected = hwc(theirs(chw(a))) if flip else a
        assert_matches(t(a, seed=seed), expected)
    assert seen == {True, False}
    assert ours(p=1.0).params(height=1, width=1, seed=5) == {"flip": True}
    assert ours(p=0.0).params(height=1, width=1, seed=5) == {"flip": False}


@pytest.mark.parametrize("value", [0, 200, [10, 20, 30], 127.9, -1.5])
def test_random_erasing_is_erase(value):
    t = T.RandomErasing(p=0.7, value=value)
    erased = 0
    for seed in range(30):
        a = image((40, 50, 3), seed)
        p = t.params(height=40, width=50, seed=seed)
        expected = a
        if p["erase"]:
            erased += 1
            v = torch.tensor([float(x) for x in np.atleast_1d(value)])[:, None, None]
            expected = hwc(F.erase(chw(a), p["top"], p["left"], p["height"], p["width"], v))
        assert_matches(t(a, seed=seed), expected)
    assert 0 < erased < 30


def test_random_erasing_float_images_after_normalize():
    base = T.Compose([T.ToFloat(), T.Normalize([0.5] * 3, [0.25] * 3), T.ToChw()])(image((32, 24, 3), 4))
    t = T.RandomErasing(p=1.0, value=[1.0, -2.0, 0.5])
    p = t.params(height=32, width=24, seed=9)
    x = torch.from_numpy(np.asarray(base).copy())
    assert x.shape == (3, 32, 24)
    theirs = F.erase(x, p["top"], p["left"], p["height"], p["width"], torch.tensor([1.0, -2.0, 0.5])[:, None, None])
    assert_matches(t(base, seed=9), theirs.numpy())


def test_random_erasing_random_values_are_normal_on_float_images():
    t = T.RandomErasing(p=1.0, scale=(0.3, 0.3), ratio=(1.0, 1.0), value="random")
    a = np.zeros((100, 100, 1), np.float32)
    out = np.asarray(t(a, seed=2))
    p = t.params(height=100, width=100, seed=2)
    region = out[p["top"] : p["top"] + p["height"], p["left"] : p["left"] + p["width"]]
    assert region.size == 55 * 55
    assert abs(region.mean()) < 0.1
    assert abs(region.std() - 1) < 0.05
    assert (out == 0).sum() == out.size - region.size


def test_random_apply_applies_all_or_nothing():
    t = T.RandomApply([T.RandomCrop(8), T.RandomHorizontalFlip(p=1.0)], p=0.5)
    results = {True: 0, False: 0}
    for seed in range(40):
        a = image((10, 12, 3), seed)
        applied = t.params(height=10, width=12, seed=seed)["apply"]
        results[applied] += 1
        out = np.asarray(t(a, seed=seed))
        if applied:
            assert out.shape == (8, 8, 3)
            # The steps draw as the steps of a Compose with the same seed.
            assert_matches(out, T.Compose(t.transforms)(a, seed=seed))
        else:
            assert_matches(out, a)
    assert results[True] > 5
    assert results[False] > 5


# ----- seeds -----


def test_a_seed_gives_the_same_image_and_params():
    t = T.Compose([T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.RandomErasing(p=1.0)])
    a = image((50, 70, 3), 0)
    first = np.asarray(t(a, seed=123))
    assert_matches(t(a, seed=123), first)
    assert_matches(t(a, seed=123 + 2**64), first)  # seeds are taken modulo 2**64
    others = [np.asarray(t(a, seed=s)) for s in range(124, 134)]
    assert all(not np.array_equal(o, first) for o in others)
    rrc = T.RandomResizedCrop(20)
    assert rrc.params(height=50, width=70, seed=-1) == rrc.params(height=50, width=70, seed=2**64 - 1)


def test_without_a_seed_each_call_draws_afresh():
    t = T.RandomResizedCrop(20)
    drawn = {tuple(t.params(height=500, width=700).values()) for _ in range(20)}
    assert len(drawn) > 15
    a = image((50, 70, 3), 0)
    outs = {np.asarray(t(a)).tobytes() for _ in range(10)}
    assert len(outs) > 5


def test_a_lone_op_draws_as_the_first_step_of_a_compose():
    a = image((50, 70, 3), 2)
    t = T.RandomResizedCrop(20)
    assert_matches(T.Compose([t])(a, seed=77), t(a, seed=77))
    # The second step of a Compose draws from another stream than the op alone.
    flip = T.RandomHorizontalFlip()
    lone = [flip.params(height=1, width=1, seed=s)["flip"] for s in range(64)]
    second = [np.array_equal(np.asarray(T.Compose([T.ToRgb(), flip])(a, seed=s)), a[:, ::-1]) for s in range(64)]
    assert lone != second


# ----- colour: ColorJitter, RandomGrayscale -----


def every_colour() -> np.ndarray:
    """All 2^24 RGB colours, as a 4096 x 4096 image."""
    v = np.arange(256, dtype=np.uint8)
    r, g, b = np.meshgrid(v, v, v, indexing="ij")
    return np.stack([r.ravel(), g.ravel(), b.ravel()], -1).reshape(4096, 4096, 3)


@pytest.fixture(scope="module")
def colours() -> np.ndarray:
    return every_colour()


def jitter(**ranges) -> T.ColorJitter:
    """A ColorJitter whose factors are fixed: ranges of one value each."""
    return T.ColorJitter(**{k: (v, v) for k, v in ranges.items()})


@pytest.mark.parametrize("factor", [0.0, 0.37, 1.0, 1.9, 4.2])
def test_brightness_on_every_value(factor):
    a = np.arange(256, dtype=np.uint8).reshape(16, 16, 1).repeat(3, axis=2)
    assert_near_torch(jitter(brightness=factor)(a, seed=0), hwc(F.adjust_brightness(chw(a), factor)))


def test_saturation_on_every_colour(colours):
    assert_near_torch(jitter(saturation=0.37)(colours, seed=0), hwc(F.adjust_saturation(chw(colours), 0.37)))


@pytest.mark.parametrize("factor", [0.0, 1.0, 1.9])
def test_saturation(factor):
    a = image((256, 256, 3), 6)
    assert_near_torch(jitter(saturation=factor)(a, seed=0), hwc(F.adjust_saturation(chw(a), factor)))


def test_hue_on_every_colour(colours):
    assert_near_torch(jitter(hue=-0.37)(colours, seed=0), hwc(F.adjust_hue(chw(colours), -0.37)))


@pytest.mark.parametrize("factor", [-0.5, -0.1, 0.0001, 0.25, 0.5])
def test_hue(factor):
    a = image((256, 256, 3), 5)
    assert_near_torch(jitter(hue=factor)(a, seed=0), hwc(F.adjust_hue(chw(a), factor)))


def test_grayscale_on_every_colour(colours):
    t = T.RandomGrayscale(p=1.0)
    assert t.params(height=1, width=1, seed=0) == {"gray": True}
    assert_near_torch(t(colours, seed=0), hwc(F.rgb_to_grayscale(chw(colours), num_output_channels=3)))
    grey = image((9, 7, 1), 1)
    assert_matches(t(grey, seed=0), grey)


@pytest.mark.parametrize("shape", [(224, 224, 3), (375, 500, 3), (50, 60, 1), (3, 2, 3)], ids=str)
@pytest.mark.parametrize("factor", [0.0, 0.4, 1.6])
def test_contrast(shape, factor):
    for kind in ("random", "smooth"):
        a = image(shape, 2, kind)
        assert_near_torch(jitter(contrast=factor)(a, seed=0), hwc(F.adjust_contrast(chw(a), factor)))


ADJUST = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
NAMES = ["brightness", "contrast", "saturation", "hue"]


@pytest.mark.parametrize("shape", [(40, 30, 3), (25, 25, 1)], ids=str)
@pytest.mark.parametrize(
    "kwargs",
    [{"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}, {"brightness": (0.2, 0.9)}, {"hue": 0.5}],
    ids=str,
)
def test_color_jitter_is_its_steps_in_its_order(shape, kwargs):
    t = T.ColorJitter(**kwargs)
    orders = set()
    for seed in range(30):
        a = image(shape, seed, "smooth" if seed % 2 else "random")
        p = t.params(height=shape[0], width=shape[1], seed=seed)
        assert sorted(p["order"]) == [0, 1, 2, 3]
        orders.add(tuple(p["order"]))
        x, steps = chw(a), 0
        for i in p["order"]:
            if p[NAMES[i]] is not None:
                x, steps = ADJUST[i](x, p[NAMES[i]]), steps + 1
        assert_near_torch(t(a, seed=seed), hwc(x), steps=steps)
        for name in NAMES:
            assert (p[name] is None) == (name not in kwargs)
    assert len(orders) > 10


# ----- TrivialAugmentWide: each operation at the drawn magnitude -----

TA = pytest.importorskip("torchvision.transforms.v2").TrivialAugmentWide

# The operations torch computes in integers; the others (geometry, blends, autocontrast) in float32.
INTEGER_OPS = {"Identity", "Posterize", "Solarize", "Equalize"}


def assert_op_matches(op: str, ours: object, theirs: object) -> None:
    if op in INTEGER_OPS:
        assert_matches(ours, theirs)
    else:
        assert_near_torch(ours, theirs)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill", [None, [10, 200, 30]])
def test_trivial_augment_ops_are_torchvisions(interpolation, fill):
    ours = T.TrivialAugmentWide(interpolation=interpolation, fill=fill)
    theirs = TA(interpolation=interpolation, fill=fill)
    ops = set()
    for seed in range(400):
        rng = np.random.default_rng(seed)
        h, w = (int(x) for x in rng.integers(3, 48, 2))
        if seed % 5 == 0:
            w = h  # square: F.rotate turns by quarters exactly
        c = 3 if seed % 4 or fill else 1
        a = image((h, w, c), seed, "random" if seed % 2 else "smooth")
        p = ours.params(height=h, width=w, seed=seed)
        ops.add(p["op"])
        expected = theirs._apply_image_or_video_transform(
            chw(a), p["op"], p["magnitude"], interpolation=theirs.interpolation, fill=theirs._fill
        )
        assert_op_matches(p["op"], ours(a, seed=seed), hwc(expected))
    assert len(ops) == 14


def test_trivial_augment_quarter_turns_and_large_images():
    ours, theirs = T.TrivialAugmentWide(), TA()
    found = 0
    for seed in range(3000):
        p = ours.params(height=1, width=1, seed=seed)
        quarter = p["op"] == "Rotate" and abs(p["magnitude"]) == 90.0
        if quarter or (p["op"] in ("ShearX", "Sharpness") and seed % 3 == 0):
            found += 1
            for shape in [(64, 64, 3), (120, 90, 3)]:
                a = image(shape, seed)
                expected = theirs._apply_image_or_video_transform(
                    chw(a), p["op"], p["magnitude"], interpolation=theirs.interpolation, fill=theirs._fill
                )
                assert_op_matches(p["op"], ours(a, seed=seed), hwc(expected))
    assert found > 20


@pytest.mark.parametrize("bins", [31, 10, 2])
def test_trivial_augment_magnitudes_are_torchvisions_bins(bins):
    ours, theirs = T.TrivialAugmentWide(num_magnitude_bins=bins), TA(num_magnitude_bins=bins)
    drawn: dict[str, set[float]] = {}
    for seed in range(4000):
        p = ours.params(height=32, width=32, seed=seed)
        drawn.setdefault(p["op"], set()).add(abs(p["magnitude"]))
    for op, (fn, _) in theirs._AUGMENTATION_SPACE.items():
        m = fn(bins, 32, 32)
        expected = {0.0} if m is None else {abs(float(x)) for x in m}
        if torch_kernels() in ("AVX2", "AVX512"):
            assert drawn[op] == expected, op
        else:
            # torch's scalar linspace rounds a few bins one float32 step apart.
            assert np.allclose(sorted(drawn[op]), sorted(expected), rtol=2**-22, atol=0), op
