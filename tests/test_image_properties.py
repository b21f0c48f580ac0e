"""Properties that hold for every image: from_array round trips, geometry equal to NumPy's,
collation equal to np.stack, and no byte string that makes Decode do anything but return an
image or raise ValueError."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from parity import assert_matches, encode, pil_image

from dataloader_rs import Image, ImageCollator
from dataloader_rs import transforms as T

DTYPES = st.sampled_from([np.uint8, np.float32])
CHANNELS = st.sampled_from([1, 3, 4])


@st.composite
def arrays(draw):
    dtype = draw(DTYPES)
    shape = (draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(CHANNELS))
    elements = st.floats(-1e6, 1e6, width=32) if dtype == np.float32 else st.integers(0, 255)
    return draw(hnp.arrays(dtype, shape, elements=elements))


@settings(max_examples=60, deadline=None)
@given(arrays())
def test_from_array_round_trip(a):
    assert_matches(Image.from_array(a), a)
    assert_matches(Image.from_array(np.ascontiguousarray(a.transpose(2, 0, 1)), layout="chw"), a)
    assert_matches(Image.from_array(a[::-1, ::2]), a[::-1, ::2])


@settings(max_examples=60, deadline=None)
@given(
    arrays(),
    st.sampled_from(["constant", "edge", "reflect", "symmetric"]),
    st.tuples(*[st.integers(0, 12)] * 4),
)
def test_pad_is_numpys(a, mode, ltrb):
    left, top, right, bottom = ltrb
    widths = ((top, bottom), (left, right), (0, 0))
    assert_matches(T.Pad(list(ltrb), padding_mode=mode)(a), np.pad(a, widths, mode=mode))


@settings(max_examples=60, deadline=None)
@given(arrays(), st.integers(-9, 9))
def test_flips_and_rotations_are_numpys(a, k):
    assert_matches(T.Rotate90(k)(a), np.rot90(a, k))
    assert_matches(T.HFlip()(a), a[:, ::-1])
    assert_matches(T.VFlip()(a), a[::-1])


@settings(max_examples=40, deadline=None)
@given(arrays(), st.integers(1, 4), st.sampled_from(["NCHW", "NHWC"]))
def test_collation_is_np_stack(a, n, layout):
    batch = ImageCollator(layout)([Image.from_array(a)] * n)
    stacked = np.stack([a] * n)
    assert_matches(batch, stacked if layout == "NHWC" else np.ascontiguousarray(stacked.transpose(0, 3, 1, 2)))


SEEDS = [
    encode(pil_image("RGB", 5, 4), "PNG"),
    encode(pil_image("RGB", 9, 8), "JPEG"),
    encode(pil_image("RGBA", 3, 3), "TIFF"),
    encode(pil_image("RGB", 4, 5), "BMP"),
]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(SEEDS), st.data())
def test_decode_of_damaged_bytes_is_an_image_or_a_value_error(seed, data):
    blob = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    blob = blob[: data.draw(st.integers(0, len(blob)))]
    try:
        image = T.Decode()(bytes(blob))
    except ValueError as e:
        message = str(e)
    else:
        message = ""
        assert image.dtype == "uint8"
        assert image.channels in (1, 2, 3, 4)
    assert message or image is not None
