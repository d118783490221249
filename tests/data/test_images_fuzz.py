"""Fuzzing the one image-opening function with hypothesis: whatever the bytes, the answer is pixels or a DataError."""

import io

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from vitkit.data.images import load_image
from vitkit.errors import DataError


def _encoded(fmt: str, mode: str) -> bytes:
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (12, 10, 3), dtype=np.uint8)).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


SEEDS = [
    _encoded(fmt, mode)
    for fmt, mode in [
        ("PNG", "RGB"),
        ("PNG", "P"),
        ("PNG", "LA"),
        ("JPEG", "RGB"),
        ("JPEG", "CMYK"),
        ("GIF", "P"),
        ("BMP", "RGB"),
        ("TIFF", "RGBA"),
        ("WEBP", "RGB"),
        ("PPM", "RGB"),
    ]
]


@st.composite
def damaged_images(draw) -> bytes:
    """A valid encoded image, then truncated, with bytes overwritten, or with bytes inserted; or plain random bytes."""
    if draw(st.booleans()) and draw(st.booleans()):
        return draw(st.binary(max_size=300))
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["truncate", "overwrite", "insert"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "truncate":
            data = data[:at]
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at : at + len(chunk)] = chunk
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@settings(
    max_examples=3 * settings.default.max_examples,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=damaged_images(), channels=st.sampled_from([1, 3]))
def test_only_pixels_or_a_data_error(tmp_path_factory, data, channels):
    path = tmp_path_factory.mktemp("fuzz") / "image.png"
    path.write_bytes(data)
    try:
        pixels = load_image(path, channels, size=16, max_pixels=1 << 20)
    except DataError as err:
        assert str(err).startswith(str(path)) and "\n" not in str(err)
    else:
        assert pixels.shape == (channels, 16, 16) and pixels.dtype == np.uint8
