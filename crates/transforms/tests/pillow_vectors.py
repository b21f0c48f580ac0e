"""Writes Pillow reference cases for `cargo run --example parity -p dlrs-transforms -- DIR`.

Development aid only (no cargo test depends on it): each case is an input image, the
operation, and Pillow's output, as raw uint8 HWC files plus one line in DIR/cases.txt:
    name h w c op arg... -> oh ow oc
Needs Pillow and numpy: python3 crates/transforms/tests/pillow_vectors.py DIR [seed]
"""

import io
import os
import sys

import numpy as np
from PIL import Image

MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos3": Image.Resampling.LANCZOS,
}


def image(rng, h, w, c, smooth):
    if smooth:
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // max(w - 1, 1) + k * 40 + y * 3) % 256 for k in range(c)], -1)
        a = base.astype(np.uint8)
    else:
        a = rng.integers(0, 256, size=(h, w, c), dtype=np.uint8)
    if c == 4 or c == 2:
        # some fully transparent and opaque pixels
        a[..., -1][rng.random((h, w)) < 0.2] = 0
        a[..., -1][rng.random((h, w)) < 0.2] = 255
    return a


def to_pil(a):
    c = a.shape[2]
    return Image.fromarray(a[..., 0] if c == 1 else a, MODES[c])


def from_pil(im):
    a = np.asarray(im)
    return a[..., None] if a.ndim == 2 else a


def expected_decode(im):
    """What Decode gives for a file Pillow opens as `im`: its own channels, palettes and colour
    keys expanded to alpha, I;16 and 1 as L, CMYK as RGB."""
    trns = "transparency" in im.info
    if im.mode in ("1", "L", "I;16"):
        if trns:
            a = np.asarray(im.convert("RGBA"))
            return a[..., [0, 3]]
        return from_pil(im.convert("L"))
    if im.mode == "LA":
        return np.asarray(im)
    if im.mode == "P":
        return np.asarray(im.convert("RGBA" if trns or "A" in im.palette.mode else "RGB"))
    if im.mode == "RGB" and trns:
        return np.asarray(im.convert("RGBA"))
    if im.mode == "CMYK":
        return np.asarray(im.convert("RGB"))
    return np.asarray(im)


def decode_cases(rng, out, lines):
    n = 0
    for h, w in [(1, 1), (5, 3), (17, 31), (64, 65)]:
        base = image(rng, h, w, 4, rng.random() < 0.5)
        variants = {
            "L": to_pil(base[..., :1]),
            "LA": to_pil(base[..., :2]),
            "RGB": to_pil(base[..., :3]),
            "RGBA": to_pil(base),
            "1": to_pil(base[..., :1]).convert("1"),
            "P": to_pil(base[..., :3]).convert("P", palette=Image.Palette.ADAPTIVE, colors=200),
            "P4": to_pil(base[..., :3]).convert("P", palette=Image.Palette.ADAPTIVE, colors=16),
            "I16": Image.fromarray(base[..., 0].astype(np.uint16) * 3),
            "CMYK": Image.fromarray(base, "CMYK"),
        }
        for name, im in variants.items():
            for fmt, kw in [("PNG", {}), ("BMP", {}), ("TIFF", {}), ("WEBP", {"lossless": True})]:
                save = im
                params = dict(kw)
                if name == "P" and fmt == "PNG" and rng.random() < 0.5:
                    params["transparency"] = 3
                if name == "P4" and fmt == "PNG":
                    params["bits"] = 4
                if name == "L" and fmt == "PNG" and rng.random() < 0.5:
                    params["transparency"] = int(base[0, 0, 0])
                if name == "RGB" and fmt == "PNG" and rng.random() < 0.5:
                    params["transparency"] = tuple(int(v) for v in base[0, 0, :3])
                b = io.BytesIO()
                try:
                    save.save(b, fmt, **params)
                except (OSError, ValueError, KeyError):
                    continue
                data = b.getvalue()
                try:
                    ref = Image.open(io.BytesIO(data))
                    ref.load()
                    exp = expected_decode(ref)
                except Exception:
                    continue
                exp = exp[..., None] if exp.ndim == 2 else exp
                fname = f"d{n}"
                with open(os.path.join(out, fname + ".in"), "wb") as fh:
                    fh.write(data)
                np.ascontiguousarray(exp).tofile(os.path.join(out, fname + ".out"))
                oh, ow, oc = exp.shape
                lines.append(f"{fname} {h} {w} 0 decode {fmt} {name} {ref.mode} -> {oh} {ow} {oc}")
                n += 1


def main():
    out = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    lines = []

    def case(name, a, op, args, b):
        h, w, c = a.shape
        a.tofile(os.path.join(out, name + ".in"))
        b = np.ascontiguousarray(b)
        b.tofile(os.path.join(out, name + ".out"))
        oh, ow, oc = b.shape
        lines.append(f"{name} {h} {w} {c} {op} {' '.join(map(str, args))} -> {oh} {ow} {oc}")

    n = 0
    sizes = [(1, 1), (1, 7), (7, 1), (5, 7), (16, 16), (31, 17), (64, 48), (100, 3), (224, 224)]
    targets = [(1, 1), (2, 3), (3, 2), (7, 5), (13, 29), (40, 40), (17, 100), (224, 224), (333, 97)]
    for h, w in sizes:
        for oh, ow in targets:
            for c in (1, 2, 3, 4):
                for f in FILTERS:
                    if rng.random() < 0.6:
                        continue
                    a = image(rng, h, w, c, rng.random() < 0.5)
                    b = from_pil(to_pil(a).resize((ow, oh), FILTERS[f]))
                    case(f"r{n}", a, "resize", [f, oh, ow], b)
                    n += 1
    # extreme aspect changes, to exercise the pass order
    for h, w, oh, ow in [
        (300, 40, 20, 39),
        (40, 300, 39, 20),
        (500, 500, 10, 240),
        (500, 500, 240, 10),
        (97, 103, 11, 50),
        (1000, 10, 3, 9),
        (10, 1000, 9, 3),
        (64, 64, 7, 31),
        (64, 64, 31, 7),
        (200, 100, 20, 49),
        (200, 100, 20, 51),
    ]:
        for c in (1, 3, 4):
            for f in ("bilinear", "bicubic", "lanczos3", "nearest"):
                a = image(rng, h, w, c, False)
                b = from_pil(to_pil(a).resize((ow, oh), FILTERS[f]))
                case(f"r{n}", a, "resize", [f, oh, ow], b)
                n += 1
    for c in (2, 3, 4):
        a = image(rng, 9, 11, c, False)
        case(f"g{c}", a, "gray", [], from_pil(to_pil(a).convert("L")))
    decode_cases(rng, out, lines)
    with open(os.path.join(out, "cases.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"{len(lines)} cases in {out} (Pillow {Image.__version__})")


if __name__ == "__main__":
    main()
