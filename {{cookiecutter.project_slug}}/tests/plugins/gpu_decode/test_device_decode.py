"""The gpu_decode answer's plugin (plugins/gpu_decode/), `--decode device`: the workers read JPEG bytes and draw the
augmentation, the device decodes and transforms.

On a machine without a GPU the CPU stands in for the device (decode_jpeg(device="cpu") is TorchCodec's or
torchvision's libjpeg-turbo decode, the transforms are the same kernels): the device path must then give the CPU path's
pixels exactly, for every recipe, with loader workers, and skip unreadable files as it does.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch
from host_reads import HostReads, epoch_reads
from PIL import Image
from run_helpers import assert_same_run, load_cpu, start_train, train_command, wait_for

import train
from {{ cookiecutter.package_name }} import settings
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.folders import DataError
from {{ cookiecutter.package_name }}.data.pipeline import build_loaders
from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.plugins import gpu_decode
from {{ cookiecutter.package_name }}.plugins.gpu_decode.decoding import EncodedBatch, choose_decode
from {{ cookiecutter.package_name }}.plugins.gpu_decode.jpeg import decode_jpegs, mostly_jpeg, read_encoded
from {{ cookiecutter.package_name }}.training.hardware import Hardware

CPU = torch.device("cpu")
PLUGINS = [gpu_decode.PLUGIN]  # what train.py installs in this bake (plugins.load_plugins)
SIZES = [(48, 36), (37, 51), (64, 40), (40, 40), (53, 47)]  # (W, H): landscape, portrait, square, odd


def _photo(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A smooth random image (JPEG-like content), so resizing and cropping move real detail."""
    small = (rng.random((4, 4, 3)) * 255).astype(np.uint8)
    noise = (rng.random((height, width, 3)) * 40).astype(np.uint8)
    return Image.fromarray(np.asarray(Image.fromarray(small).resize((width, height), Image.BILINEAR)) // 2 + noise)


def _write_jpegs(root, rng: np.random.Generator) -> None:
    """train/ and val/ of two classes: JPEGs of varied sizes, a grey one, an EXIF-rotated one, a CMYK one, a PNG."""
    for split, count in (("train", 7), ("val", 3)):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                width, height = SIZES[(i + ord(label)) % len(SIZES)] if i != 2 else (48, 36)
                image = _photo(rng, width, height)
                if i == 1:
                    image.convert("L").save(folder / f"{i}.jpg", quality=90)
                elif i == 2:
                    exif = Image.Exif()
                    exif[0x0112] = 6  # stored sideways: shown turned a quarter
                    image.save(folder / f"{i}.jpg", exif=exif, quality=85)
                elif i == 3:
                    image.convert("CMYK").save(folder / f"{i}.jpg")
                elif i == 4:
                    image.save(folder / f"{i}.png")
                else:
                    image.save(folder / f"{i}.jpeg", quality=75 + 5 * i, subsampling=i % 3)


@pytest.fixture(scope="module")
def jpeg_data(tmp_path_factory):
    """A small ImageFolder tree of mostly JPEGs, of the kinds users have."""
    root = tmp_path_factory.mktemp("jpegs")
    _write_jpegs(root, np.random.default_rng(0))
    return root


def _batches(data, decode: str, augment: str, workers: int) -> list[torch.Tensor]:
    """Every batch of two training epochs and one validation pass, as normalised floats on the CPU."""
    cfg = TrainConfig(data=str(data), image_size=24, batch_size=5, workers=workers, pretrained=False,
                      augment=augment, decode=decode, seed=3)
    loaders = build_loaders(cfg, CPU, plugins=PLUGINS)
    assert loaders.decode == decode
    hw = Hardware.create(CPU, mean=loaders.preprocessing.mean, std=loaders.preprocessing.std)
    seen = []
    for epoch in (1, 2):
        loaders.train_loader.sampler.set_epoch(epoch)
        seen += [hw.batch(images, targets) for images, targets in loaders.train_loader]
    seen += [hw.batch(images, targets) for images, targets in loaders.val_loader]
    loaders.train_loader.close()
    loaders.val_loader.close()
    return [tensor for pair in seen for tensor in pair]


@pytest.mark.parametrize(("augment", "workers"), [("none", 0), ("standard", 0), ("light", 0), ("standard", 1)])
def test_the_device_path_gives_the_cpu_paths_pixels(jpeg_data, augment, workers):
    """Same seed, same files: every batch the device path decodes and transforms equals the CPU path's, exactly."""
    on_cpu = _batches(jpeg_data, "cpu", augment, workers)
    on_device = _batches(jpeg_data, "device", augment, workers)
    assert len(on_cpu) == len(on_device) == 2 * (2 * 3 + 2)  # (images, targets) x (3 + 3 train, 2 val) batches
    for ours, theirs in zip(on_device, on_cpu):
        assert ours.shape == theirs.shape and torch.equal(ours, theirs)


def test_the_workers_hand_over_bytes_not_pixels(jpeg_data):
    """A JPEG leaves the worker as its file's bytes with the drawn parameters; a PNG or CMYK JPEG as pixels."""
    cfg = TrainConfig(data=str(jpeg_data), image_size=24, batch_size=14, workers=1, pretrained=False,
                      augment="standard", decode="device")
    loaders = build_loaders(cfg, CPU, plugins=PLUGINS)
    loaders.train_loader.sampler.set_epoch(1)
    images, _ = next(iter(loaders.train_loader))
    loaders.train_loader.close()
    assert isinstance(images, EncodedBatch)
    kinds = sorted(type(sample).__name__ for sample in images.samples)
    assert kinds == ["Encoded"] * 10 + ["Tensor"] * 4  # 5 JPEGs of 7 per class read as bytes
    encoded = [sample for sample in images.samples if not isinstance(sample, torch.Tensor)]
    assert all(sample.data.dtype == torch.uint8 and sample.data.dim() == 1 for sample in encoded)
    assert images.to_images(CPU).shape == (14, 3, 24, 24)


def test_a_rotated_jpeg_reports_its_upright_size(jpeg_data):
    """EXIF orientation 6 swaps height and width, as Pillow's exif_transpose does on the CPU path."""
    sideways = next((jpeg_data / "train" / "a").glob("2.jpg"))
    with Image.open(sideways) as image:
        width, height = image.size
    assert read_encoded(str(sideways)).size == (width, height)  # (H, W) upright = (W, H) stored


def test_a_truncated_jpeg_is_skipped_and_reported_as_on_the_cpu_path(tmp_path):
    """A cut-off JPEG is refused in the worker, so the run skips it and names it, on either path."""
    _write_jpegs(tmp_path, np.random.default_rng(1))
    broken = tmp_path / "train" / "a" / "0.jpeg"
    broken.write_bytes(broken.read_bytes()[:-200])
    with pytest.raises(DataError, match="truncated"):
        read_encoded(str(broken))
    reported = {}
    for decode in ("cpu", "device"):
        cfg = TrainConfig(data=str(tmp_path), image_size=24, batch_size=5, workers=0, pretrained=False, decode=decode)
        reported[decode] = []
        loaders = build_loaders(cfg, CPU, plugins=PLUGINS,
                                on_unreadable=lambda split, path, reason, seen=reported[decode]: seen.append(path))
        loaders.train_loader.sampler.set_epoch(1)
        batches = [images for images, _ in loaders.train_loader]
        assert sum(len(images) for images in batches) == 14
    assert reported["cpu"] == reported["device"] == [str(broken)]


def test_auto_decodes_on_the_device_only_for_jpeg_data_on_cuda():
    """auto: the CPU path on the CPU (and MPS, XPU) and for PNG data; --decode device refuses a decoded cache."""
    jpegs, pngs = ["a/1.jpg", "a/2.JPEG", "b/3.png"], ["a/1.png", "b/2.png", "b/3.jpg"]
    assert mostly_jpeg(jpegs) and not mostly_jpeg(pngs)
    assert choose_decode("auto", CPU, jpegs, cached=False)[0] == "cpu"
    assert choose_decode("auto", torch.device("mps"), jpegs, cached=False)[0] == "cpu"
    assert choose_decode("device", CPU, pngs, cached=False)[0] == "device"  # asked for: the CPU stands in
    assert choose_decode("cpu", CPU, jpegs, cached=False) == ("cpu", "--decode cpu")
    with pytest.raises(DataError, match="--cache-images"):
        choose_decode("device", CPU, jpegs, cached=True)
    with pytest.raises(DataError, match="decodes JPEGs on mps"):
        choose_decode("device", torch.device("mps"), jpegs, cached=False)
    if torch.cuda.is_available():
        assert choose_decode("auto", torch.device("cuda"), jpegs, cached=False)[0] == "device"
        assert choose_decode("auto", torch.device("cuda"), pngs, cached=False)[0] == "cpu"


def test_device_decode_where_the_device_cannot_decode_is_refused_before_the_data_is_read():
    """The plugin answers train.py's check of --decode device on the run's device (settings.check_available, made
    before anything is built): a device no JPEG decoder runs on (here meta; MPS, XPU) is one line naming
    --decode cpu; the CPU, which stands in for CUDA in these tests, can."""
    refusal = r"^--decode device: neither TorchCodec nor torchvision decodes JPEGs on meta here; use --decode cpu$"
    with pytest.raises(ConfigError, match=refusal):
        settings.check_available(PLUGINS, "decode", "device", torch.device("meta"))
    settings.check_available(PLUGINS, "decode", "device", CPU)


def test_a_cut_off_file_that_is_no_jpeg_is_decoded_as_before(tmp_path):
    """Bytes that do not start like a JPEG take the CPU path's loader (and its errors)."""
    fake = tmp_path / "x.jpg"
    fake.write_bytes(b"not an image")
    with pytest.raises(DataError, match="cannot read image"):
        read_encoded(str(fake))
    buffer = io.BytesIO()
    Image.new("RGB", (5, 4)).save(buffer, format="PNG")
    fake.write_bytes(buffer.getvalue())
    assert isinstance(read_encoded(str(fake)), Image.Image)


def test_a_jpeg_with_bytes_after_its_end_is_read_without_them(tmp_path):
    """Padding or a motion photo's video after the end-of-image marker: the device path takes the JPEG's own bytes
    (decoded like Pillow's), as the CPU path takes the file; a cut-off JPEG is still refused."""
    buffer = io.BytesIO()
    Image.effect_noise((40, 30), 60).convert("RGB").save(buffer, "JPEG", quality=90)
    jpeg = buffer.getvalue()
    path = tmp_path / "motion.jpg"
    path.write_bytes(jpeg + b"\0" * 3000 + b"ftypmp42" + os.urandom(5000))
    encoded = read_encoded(str(path))
    assert bytes(encoded.data.numpy()) == jpeg
    assert decode_jpegs([encoded.data], CPU)[0].shape == (3, 30, 40)
    path.write_bytes(jpeg[:-300])
    with pytest.raises(DataError, match="truncated"):
        read_encoded(str(path))


@pytest.fixture(scope="module")
def tiny_jpegs(tiny_data, tmp_path_factory):
    """tiny_data's images as JPEG files."""
    root = tmp_path_factory.mktemp("tiny-jpegs")
    for png in tiny_data.rglob("*.png"):
        target = root / png.relative_to(tiny_data).with_suffix(".jpg")
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.open(png).convert("RGB").save(target)
    return root


def test_decoding_on_the_device_adds_no_read_per_step(tiny_jpegs, monkeypatch):
    """Decoding, resizing, cropping and flipping each batch on the device reads nothing back: an epoch of 12 steps
    reads the device as often as one of 3 (tests/training/test_host_syncs.py counts the same for the CPU path)."""
    reads = HostReads(monkeypatch)
    few, many = (epoch_reads(tiny_jpegs, CPU, size, reads, decode="device", plugins=PLUGINS) for size in (8, 2))
    assert many == few, f"{many - few} more host reads for 9 more steps: a read per step crept in"


@pytest.mark.slow
def test_a_run_decoded_on_the_device_resumes_exactly_after_a_kill(jpeg_data, tmp_path):
    """--decode device, random crops and flips: SIGKILLed mid-epoch (a loader worker running), then resumed, the
    run ends with the weights of an uninterrupted one (decoded on the device in the main process)."""
    extra = ("--decode", "device", "--augment", "standard", "--save-every-minutes", "1e-6")
    assert train.main(train_command(jpeg_data, tmp_path / "reference", 0, False, extra)[2:]) == 0
    out, log = tmp_path / "killed", tmp_path / "killed.log"
    process = start_train(jpeg_data, out, 1, resume=False, pause="step:2:2", log=log, extra=extra)
    try:
        wait_for(process, log, "paused at step:2:2")
    finally:
        process.kill()
        process.wait()
    held = load_cpu(out / "last.pt")
    assert (held["epoch"], held["step"]) == (2, 1)  # mid-epoch: the rest of epoch 2 is re-derived
    assert train.main(train_command(jpeg_data, out, 1, "auto", extra)[2:]) == 0
    assert_same_run(load_cpu(out / "last.pt"), load_cpu(tmp_path / "reference" / "last.pt"))
