import struct

import pytest

PNG = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG
    return struct.unpack(">II", data[16:24])  # IHDR width, height


@pytest.fixture
def png_size():
    """A function: the (width, height) of a PNG file, after checking that it is one."""
    return _png_size
