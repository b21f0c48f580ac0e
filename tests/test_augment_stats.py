"""The random transforms draw from torchvision's distributions: 10,000 draws of ours (seeds 0 to
9,999) against 10,000 of torchvision's ``make_params`` (torch seeded), compared with two-sample
Kolmogorov-Smirnov tests and chi-square tests of homogeneity at a 0.1 % level each. Every seed
is fixed, so each test gives the same verdict every run; each family also checks that the same
test rejects a distribution that is wrong (the power of the check)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from dataloader_rs import transforms as T

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2")

N = 10_000
ALPHA = 1e-3


# ----- the tests, without scipy -----


def ks_statistic(a, b) -> float:
    """The two-sample Kolmogorov-Smirnov statistic (exact with ties)."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    grid = np.union1d(a, b)
    fa = np.searchsorted(a, grid, side="right") / len(a)
    fb = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


def ks_critical(n: int, m: int, alpha: float = ALPHA) -> float:
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def same_distribution(a, b) -> bool:
    return ks_statistic(a, b) <= ks_critical(len(a), len(b))


def chi2_critical(df: int, alpha: float = ALPHA) -> float:
    """The chi-square quantile 1 - alpha (Wilson-Hilferty; z = 3.09 for 0.1 %)."""
    z = {1e-3: 3.0902}[alpha]
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def same_categories(a, b) -> bool:
    """Chi-square test of homogeneity of two samples of categories (rare ones pooled)."""
    count_a, count_b = Counter(a), Counter(b)
    keys = sorted(set(count_a) | set(count_b))
    ca = np.array([count_a[k] for k in keys], float)
    cb = np.array([count_b[k] for k in keys], float)
    total = ca + cb
    # Pool categories with fewer than 10 observations in all into one.
    small = total < 10
    if small.any():
        ca = np.append(ca[~small], ca[small].sum())
        cb = np.append(cb[~small], cb[small].sum())
        total = ca + cb
    na, nb = ca.sum(), cb.sum()
    ea, eb = total * na / (na + nb), total * nb / (na + nb)
    stat = float((((ca - ea) ** 2) / ea).sum() + (((cb - eb) ** 2) / eb).sum())
    df = len(total) - 1
    return df == 0 or stat <= chi2_critical(df)


def same_rate(k: int, n: int, p: float) -> bool:
    """k successes in n are consistent with probability p (normal approximation, 0.1 %)."""
    sd = math.sqrt(n * p * (1 - p))
    return (sd == 0 and k == n * p) or abs(k - n * p) <= 3.29 * sd


def ours(t, h: int, w: int, n: int = N) -> list[dict]:
    return [t.params(height=h, width=w, seed=s) for s in range(n)]


def theirs(t, h: int, w: int, n: int = N, seed: int = 0) -> list[dict]:
    torch.manual_seed(seed)
    img = torch.empty(3, h, w, dtype=torch.uint8)
    return [t.make_params([img]) for _ in range(n)]


def column(params: list[dict], key: str) -> list:
    return [p[key] for p in params]


# ----- the check itself -----


def test_the_checks_reject_what_differs_and_accept_what_does_not():
    rng = np.random.default_rng(0)
    assert same_distribution(rng.uniform(size=N), rng.uniform(size=N))
    assert not same_distribution(rng.uniform(size=N), rng.uniform(0.03, 1.0, size=N))
    assert same_categories(list(rng.integers(0, 6, N)), list(rng.integers(0, 6, N)))
    loaded = list(rng.choice(6, N, p=[0.25, 0.15, 0.15, 0.15, 0.15, 0.15]))
    assert not same_categories(list(rng.integers(0, 6, N)), loaded)
    assert abs(chi2_critical(10) - 29.59) < 0.2
    assert abs(chi2_critical(1) - 10.83) < 0.5


# ----- RandomResizedCrop -----


@pytest.mark.parametrize(("h", "w"), [(375, 500), (224, 224), (640, 120)])
def test_random_resized_crop_matches_torchvision(h, w):
    a = ours(T.RandomResizedCrop(224), h, w)
    b = theirs(v2.RandomResizedCrop(224), h, w)
    for key in ("height", "width", "top", "left"):
        assert same_distribution(column(a, key), column(b, key)), key
    area = lambda ps: [p["height"] * p["width"] for p in ps]  # noqa: E731
    assert same_distribution(area(a), area(b))
    # Power: torchvision with another scale is told apart.
    wrong = theirs(v2.RandomResizedCrop(224, scale=(0.12, 1.0)), h, w)
    assert not same_distribution(area(a), area(wrong))


def test_random_resized_crop_falls_back_as_often_as_torchvision():
    # Wide crops of a tall image: the ten tries often all miss, then the centred crop clamped
    # to the smallest ratio.
    kwargs = {"scale": (0.25, 1.0), "ratio": (1.0, 2.5)}
    a = ours(T.RandomResizedCrop(32, **kwargs), 200, 100)
    b = theirs(v2.RandomResizedCrop(32, **kwargs), 200, 100)
    centre = {"top": 50, "left": 0, "height": 100, "width": 100}
    fa = sum(p == centre for p in a)
    fb = sum(p == centre for p in b)
    assert 300 < fb < 3000, fb  # the case is exercised
    assert same_rate(fa, N, fb / N), (fa, fb)
    for key in ("height", "width"):
        assert same_distribution(column(a, key), column(b, key)), key


# ----- RandomCrop -----


def test_random_crop_places_uniformly():
    a = ours(T.RandomCrop(32, padding=4), 32, 32)
    b = theirs(v2.RandomCrop(32, padding=4), 32, 32)
    for key in ("top", "left"):
        assert same_categories(column(a, key), column(b, key)), key
    assert set(column(a, "top")) == set(range(9))
    assert all(p["padding"] == [4, 4, 4, 4] for p in a)
    skewed = [min(8, x + (x == 0)) for x in column(b, "top")]
    assert not same_categories(column(a, "top"), skewed)


def test_random_crop_pad_if_needed():
    a = ours(T.RandomCrop((40, 30), pad_if_needed=True), 35, 50)
    b = theirs(v2.RandomCrop((40, 30), pad_if_needed=True), 35, 50)
    assert all(p["padding"] == [0, 5, 0, 5] for p in a)
    for key in ("top", "left"):
        assert same_categories(column(a, key), column(b, key)), key


# ----- coins -----


@pytest.mark.parametrize("p", [0.5, 0.2, 0.9])
@pytest.mark.parametrize("cls", [T.RandomHorizontalFlip, T.RandomVerticalFlip])
def test_flip_rates(cls, p):
    k = sum(column(ours(cls(p=p), 8, 8), "flip"))
    assert same_rate(k, N, p)
    assert not same_rate(k, N, p + 0.03)


def test_random_apply_rate():
    t = T.RandomApply([T.RandomHorizontalFlip()], p=0.3)
    k = sum(column(ours(t, 8, 8), "apply"))
    assert same_rate(k, N, 0.3)
    assert not same_rate(k, N, 0.33)


# ----- RandomErasing -----


def test_random_erasing_matches_torchvision():
    h, w = 224, 224
    a = ours(T.RandomErasing(p=0.5), h, w)
    k = sum(column(a, "erase"))
    # Some of the coins that come up find no rectangle in ten tries; torchvision's too.
    b = theirs(v2.RandomErasing(p=1.0), h, w)
    found = [p for p in b if p["v"] is not None]
    assert same_rate(k, N, 0.5 * len(found) / N)
    erased = [p for p in a if p["erase"]]
    for ours_key, their_key in (("height", "h"), ("width", "w"), ("top", "i"), ("left", "j")):
        assert same_distribution(column(erased, ours_key), column(found, their_key)), ours_key
    wrong = [p for p in theirs(v2.RandomErasing(p=1.0, scale=(0.02, 0.25)), h, w) if p["v"] is not None]
    assert not same_distribution(column(erased, "height"), column(wrong, "h"))


# ----- colour -----


def test_color_jitter_matches_torchvision():
    kwargs = {"brightness": 0.4, "contrast": (0.5, 1.5), "saturation": 0.4, "hue": 0.1}
    a = ours(T.ColorJitter(**kwargs), 8, 8)
    b = theirs(v2.ColorJitter(**kwargs), 8, 8)
    order_a = [tuple(p["order"]) for p in a]
    order_b = [tuple(p["fn_idx"].tolist()) for p in b]
    assert len(set(order_a)) == 24
    assert same_categories(order_a, order_b)
    for name in ("brightness", "contrast", "saturation", "hue"):
        assert same_distribution(column(a, name), column(b, f"{name}_factor")), name
    # Power: a fixed order, or a narrower range, is told apart.
    assert not same_categories(order_a, [(0, 1, 2, 3)] * 2000 + order_b[2000:])
    narrow = theirs(v2.ColorJitter(brightness=0.35), 8, 8)
    assert not same_distribution(column(a, "brightness"), column(narrow, "brightness_factor"))


def test_random_grayscale_rate():
    k = sum(column(ours(T.RandomGrayscale(), 8, 8), "gray"))
    assert same_rate(k, N, 0.1)
    assert not same_rate(k, N, 0.12)


# ----- TrivialAugmentWide -----


def trivial_draws(t, n: int = N) -> list[tuple[str, float]]:
    """torchvision's (operation, magnitude) for n calls, recorded where it applies them."""
    seen = []

    def record(image, transform_id, magnitude, interpolation, fill):
        seen.append((transform_id, magnitude))
        return image

    t._apply_image_or_video_transform = record
    torch.manual_seed(0)
    img = torch.zeros(3, 8, 8, dtype=torch.uint8)
    for _ in range(n):
        t(img)
    return seen


def test_trivial_augment_matches_torchvision():
    a = [(p["op"], p["magnitude"]) for p in ours(T.TrivialAugmentWide(), 8, 8)]
    b = trivial_draws(v2.TrivialAugmentWide())
    assert same_categories([op for op, _ in a], [op for op, _ in b])
    assert len({op for op, _ in a}) == 14
    for op in ("Rotate", "ShearX", "Posterize", "Solarize"):
        ma = [m for o, m in a if o == op]
        mb = [m for o, m in b if o == op]
        assert same_categories(ma, mb), op
    # Power: a sign that is never drawn, or one operation twice as likely, is told apart.
    rotate_a = [m for o, m in a if o == "Rotate"]
    assert not same_categories(rotate_a, [abs(m) for o, m in b if o == "Rotate"])
    doubled = [op for op, _ in b] + [op for op, _ in b if op == "Equalize"]
    assert not same_categories([op for op, _ in a], doubled)
