"""Image transforms implemented in Rust, with torchvision's names and Pillow's values.

Each transform is callable as ``t(obj) -> Image`` (``obj``: encoded bytes, an ``Image``, or an
array ``Image.from_array`` takes) and releases the interpreter while it runs. Passed to
``PyDataloader(transform=...)`` (a single transform or a ``Compose``), it runs on the loader's
threads without the interpreter.
"""

from dataloader_rs._native import (
    CenterCrop,
    Compose,
    Crop,
    Decode,
    HFlip,
    Image,
    ImageBatch,
    ImageCollator,
    Normalize,
    Pad,
    PadTo,
    Resize,
    Rotate90,
    ToChw,
    ToFloat,
    ToGray,
    ToHwc,
    ToRgb,
    ToRgba,
    Transform,
    VFlip,
)

__all__ = [
    "CenterCrop",
    "Compose",
    "Crop",
    "Decode",
    "HFlip",
    "Image",
    "ImageBatch",
    "ImageCollator",
    "Normalize",
    "Pad",
    "PadTo",
    "Resize",
    "Rotate90",
    "ToChw",
    "ToFloat",
    "ToGray",
    "ToHwc",
    "ToRgb",
    "ToRgba",
    "Transform",
    "VFlip",
]
