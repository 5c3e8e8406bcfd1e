"""Reading images: deep grey levels scaled to 8 bits, EXIF orientation applied, decompression bombs unreadable."""

import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from {{ cookiecutter.package_name }}.data import check
from {{ cookiecutter.package_name }}.data.folders import DataError, load_rgb


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_bomb(path, side: int = 30000):
    """A real, valid 1-bit PNG of side x side black pixels: about 100 KB on disk, 900 megapixels decoded."""
    rows = (b"\0" * (1 + side // 8)) * 1000  # 1000 rows at a time: a filter byte, then the packed bits
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(rows) for _ in range(side // 1000)) + packer.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)  # 1 bit per pixel, grey
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", body) + _chunk(b"IEND", b""))
    return path


def test_a_16_bit_png_of_mid_grey_reads_as_mid_grey(tmp_path):
    """32768 of 65535 is grey 128 of 255, not white (convert("RGB") alone clips it to 255)."""
    path = tmp_path / "grey16.png"
    Image.fromarray(np.full((8, 8), 32768, dtype=np.uint16)).save(path)
    assert Image.open(path).mode.startswith("I")  # really 16 bits on disk
    pixels = np.asarray(load_rgb(str(path)))
    assert pixels.shape == (8, 8, 3)
    assert np.all(np.abs(pixels.astype(int) - 128) <= 1)


@pytest.mark.parametrize("values, expected", [(np.full((4, 4), 0.5, np.float32), 128),
                                              (np.full((4, 4), 1000, np.int32), 4)])
def test_float_and_integer_tiffs_are_scaled_not_saturated(tmp_path, values, expected):
    """A float TIFF in [0, 1] and a 32-bit integer TIFF read in proportion to their range."""
    path = tmp_path / "deep.tif"
    Image.fromarray(values).save(path)
    pixels = np.asarray(load_rgb(str(path))).astype(int)
    assert np.all(np.abs(pixels - expected) <= 1)


def test_exif_orientation_is_applied(tmp_path):
    """A photo stored sideways with EXIF orientation 6 (rotate 90 degrees) reads upright."""
    path = tmp_path / "sideways.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation
    Image.new("RGB", (40, 20), "red").save(path, exif=exif.tobytes())
    assert load_rgb(str(path)).size == (20, 40)


def test_a_decompression_bomb_is_an_unreadable_image(tmp_path):
    """PIL's DecompressionBombError (neither OSError nor ValueError) becomes the DataError of an unreadable file."""
    bomb = write_bomb(tmp_path / "bomb.png")
    with pytest.raises(DataError, match="bomb.png"):
        load_rgb(str(bomb))


def test_data_check_lists_a_bomb_as_unreadable_without_a_traceback(tiny_data, tmp_path, capsys):
    """The data check counts the bomb among the unreadable files of its split and prints no traceback."""
    import shutil

    root = tmp_path / "data"
    shutil.copytree(tiny_data, root)
    first_class = sorted(p for p in (root / "train").iterdir() if p.is_dir())[0]
    write_bomb(first_class / "bomb.png")
    code = check.main(["check", str(root), "--workers", "1", "--max-bad-fraction", "0.5"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "1 unreadable" in out and "unreadable: " in out and "bomb.png" in out
    assert "Traceback" not in out + err
