"""Image transforms implemented in Rust, with torchvision's names and Pillow's values, and
torchvision's random augmentations with torchvision's values.

Each transform is callable as ``t(obj) -> Image`` (``obj``: encoded bytes, an ``Image``, or an
array ``Image.from_array`` takes) and releases the interpreter while it runs. Passed to
``PyDataloader(transform=...)`` (a single transform or a ``Compose``), it runs on the loader's
threads without the interpreter.

The random transforms (subclasses of ``RandomTransform``) draw from a counter-based generator
keyed by the loader's seed, the epoch, the item's dataset index and the transform's position in
the ``Compose``: a loader's batches are the same whatever the number of workers, the item
concurrency, the thread timing or a resume, and differ from one epoch to the next. Called
directly, ``t(image, seed=s)`` draws from ``s`` (a fresh seed per call when none is given:
not reproducible), and ``t.params(height=h, width=w, seed=s)`` returns what it draws.
"""

from dataloader_rs._native import (
    CenterCrop,
    ColorJitter,
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
    RandomApply,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomTransform,
    RandomVerticalFlip,
    Resize,
    Rotate90,
    ToChw,
    ToFloat,
    ToGray,
    ToHwc,
    ToRgb,
    ToRgba,
    Transform,
    TrivialAugmentWide,
    VFlip,
)

__all__ = [
    "CenterCrop",
    "ColorJitter",
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
    "RandomApply",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomTransform",
    "RandomVerticalFlip",
    "Resize",
    "Rotate90",
    "ToChw",
    "ToFloat",
    "ToGray",
    "ToHwc",
    "ToRgb",
    "ToRgba",
    "Transform",
    "TrivialAugmentWide",
    "VFlip",
]
