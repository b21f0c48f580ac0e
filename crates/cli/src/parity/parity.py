"""The Pillow/NumPy side of `dlrs parity` (embedded in the dlrs binary).

Usage: python parity.py MANIFEST OUT_DIR

MANIFEST (JSON) lists the images ({"id", "path", "input"}: the file, and the .npy of the pixels
Rust decoded) and the chains ({"name", "ops"}). For each image this writes OUT_DIR/<id>.decode.npy
(the file as Pillow loads it) and OUT_DIR/<id>.<chain>.npy (the chain applied to the pixels Rust
decoded, so each chain is compared on the same input), then OUT_DIR/results.json with the
versions and the errors ({"<id>/<chain>": message}).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import numpy as np
from PIL import Image

FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "lanczos3": Image.Resampling.LANCZOS,
}
MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def to_pil(a: np.ndarray) -> Image.Image:
    """An HWC uint8 array as a Pillow image of mode L, LA, RGB or RGBA."""
    mode = MODES[a.shape[2]]
    if mode == "L":
        return Image.fromarray(np.ascontiguousarray(a[:, :, 0]))
    if mode == "LA":
        return Image.merge("LA", [Image.fromarray(np.ascontiguousarray(a[:, :, i])) for i in range(2)])
    im = Image.fromarray(np.ascontiguousarray(a))
    assert im.mode == mode, (im.mode, mode)
    return im


def to_array(im: Image.Image) -> np.ndarray:
    if im.mode == "LA":
        a = np.stack([np.asarray(band) for band in im.split()], axis=2)
    else:
        a = np.asarray(im)
    return a[:, :, None] if a.ndim == 2 else a


def scaled(n: int, num: int, den: int) -> int:
    return max(1, n * num // den)


def center_crop(a: np.ndarray, ch: int, cw: int) -> np.ndarray:
    """torchvision's F.center_crop: pad with 0 when the crop is larger, offsets rounded half to even."""
    h, w = a.shape[:2]
    if ch > h or cw > w:
        left = (cw - w) // 2 if cw > w else 0
        top = (ch - h) // 2 if ch > h else 0
        right = (cw - w + 1) // 2 if cw > w else 0
        bottom = (ch - h + 1) // 2 if ch > h else 0
        a = np.pad(a, ((top, bottom), (left, right), (0, 0)))
        h, w = a.shape[:2]
        if ch == h and cw == w:
            return a
    top = int(round((h - ch) / 2.0))
    left = int(round((w - cw) / 2.0))
    return a[top : top + ch, left : left + cw]


def apply(op: str, a: np.ndarray) -> np.ndarray:
    name, *args = op.split(":")
    h, w = a.shape[:2]
    if name == "to_rgb":
        return to_array(to_pil(a).convert("RGB"))
    if name == "to_gray":
        return to_array(to_pil(a).convert("L"))
    if name == "resize":
        num, den = int(args[1]), int(args[2])
        return to_array(to_pil(a).resize((scaled(w, num, den), scaled(h, num, den)), FILTERS[args[0]]))
    if name == "center_crop":
        num, den = int(args[0]), int(args[1])
        return center_crop(a, scaled(h, num, den), scaled(w, num, den))
    if name == "pad":
        left, top, right, bottom = (int(v) for v in args[1:5])
        mode = args[0]
        return np.pad(a, ((top, bottom), (left, right), (0, 0)), mode=mode)
    if name == "hflip":
        return a[:, ::-1]
    if name == "vflip":
        return a[::-1]
    if name == "rot90":
        return np.rot90(a, int(args[0]), axes=(0, 1))
    if name == "to_float":
        return a.astype(np.float32) / np.float32(255)
    if name == "normalize":
        return (a - MEAN) / STD
    if name == "to_chw":
        return a.transpose(2, 0, 1)
    raise ValueError(f"unknown op {op!r}")


def load(path: str) -> np.ndarray:
    """The file as Pillow loads it, made L, LA, RGB or RGBA the way dlrs-transforms' Decode does."""
    with Image.open(path) as im:
        im.load()
        mode = im.mode
        if mode in ("I;16", "I;16L", "I;16B", "I", "F"):
            return np.clip(np.asarray(im), 0, 255).astype(np.uint8)[:, :, None]
        if mode == "P" or mode == "PA":
            has_alpha = mode == "PA" or "transparency" in im.info
            im = im.convert("RGBA" if has_alpha else "RGB")
        elif mode == "1":
            im = im.convert("L")
        elif mode in ("L", "RGB") and "transparency" in im.info:
            im = im.convert("LA" if mode == "L" else "RGBA")
        elif mode not in ("L", "LA", "RGB", "RGBA"):
            im = im.convert("RGB")
        return to_array(im)


def main() -> int:
    manifest = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    errors: dict[str, str] = {}
    for image in manifest["images"]:
        key = image["id"]
        try:
            np.save(out / f"{key}.decode.npy", np.ascontiguousarray(load(image["path"])))
        except Exception as e:  # reported per image, the run goes on
            errors[f"{key}/decode"] = f"{type(e).__name__}: {e}"
        pixels = np.load(image["input"])
        for chain in manifest["chains"]:
            try:
                a = pixels
                for op in chain["ops"]:
                    a = apply(op, a)
                np.save(out / f"{key}.{chain['name']}.npy", np.ascontiguousarray(a))
            except Exception as e:
                errors[f"{key}/{chain['name']}"] = "".join(traceback.format_exception_only(e)).strip()
    versions = {"python": sys.version.split()[0], "numpy": np.__version__, "pillow": Image.__version__}
    (out / "results.json").write_text(json.dumps({"versions": versions, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
