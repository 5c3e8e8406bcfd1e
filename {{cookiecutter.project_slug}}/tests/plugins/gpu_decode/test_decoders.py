"""Which library decodes JPEGs for `--decode device` (plugins/gpu_decode/jpeg.py, decoder_for), and that each gives
Pillow's pixels on the CPU, which stands in for the GPU here.

TorchCodec where it is installed (the [decode] extra, which [test] pulls in) and loads against this torch; else
torchvision's decode_jpeg, which torchvision 0.29 deprecates (a DeprecationWarning on every call, the reason
TorchCodec comes first). A library's tests skip where it is absent; the `decoder` fixture makes it the only one
decoder_for may choose, as on a machine without the other.
"""

from __future__ import annotations

import contextlib
import sys
import warnings

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.images import load_rgb
from {{ cookiecutter.package_name }}.data.pipeline import build_loaders
from {{ cookiecutter.package_name }}.plugins import gpu_decode
from {{ cookiecutter.package_name }}.plugins.gpu_decode import jpeg
from {{ cookiecutter.package_name }}.plugins.gpu_decode.decoding import choose_decode
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.run import Run

CPU = torch.device("cpu")
PLUGINS = [gpu_decode.PLUGIN]
LIBRARIES = {"torchcodec": jpeg.torchcodec_decoder, "torchvision": jpeg.torchvision_decoder}
TORCHVISION = tuple(int(part) for part in torchvision.__version__.split(".")[:2])


def _photo(seed: int, width: int = 48, height: int = 36) -> Image.Image:
    """Smooth colour with noise (JPEG-like content), so chroma subsampling and the inverse DCT have work to do."""
    rng = np.random.default_rng(seed)
    small = Image.fromarray((rng.random((4, 4, 3)) * 255).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    return Image.fromarray(np.asarray(small) // 2 + (rng.random((height, width, 3)) * 40).astype(np.uint8))


def _save(image: Image.Image, path, kind: str) -> None:
    """`image` as a JPEG of `kind`: baseline (4:2:0 and 4:4:4), progressive, grayscale, EXIF orientation 2-8, CMYK."""
    if kind.startswith("exif-"):
        exif = Image.Exif()
        exif[0x0112] = int(kind[5:])
        image.save(path, "JPEG", exif=exif, quality=85)
    elif kind == "cmyk":
        image.convert("CMYK").save(path, "JPEG", quality=85)
    elif kind == "grayscale":
        image.convert("L").save(path, "JPEG", quality=90)
    else:
        image.save(path, "JPEG", quality=80, progressive=kind == "progressive", subsampling=2 if kind == "baseline"
                   else 0)


KINDS = ["baseline", "baseline-444", "progressive", "grayscale", *(f"exif-{n}" for n in range(2, 9)), "cmyk"]


@pytest.fixture(scope="module")
def kinds_data(tmp_path_factory):
    """An ImageFolder tree whose every class folder holds one JPEG of each kind (odd sizes, so turns show)."""
    root = tmp_path_factory.mktemp("jpeg-kinds")
    for seed, folder in enumerate(("train/a", "train/b", "val/a", "val/b")):
        (root / folder).mkdir(parents=True)
        for i, kind in enumerate(KINDS):
            _save(_photo(100 * seed + i, 37 + i, 29 + 2 * i), root / folder / f"{kind}.jpg", kind)
    return root


@pytest.fixture(params=sorted(LIBRARIES))
def decoder(request, monkeypatch):
    """Each library in turn as the only decoder decoder_for may choose; skipped where it is absent."""
    library = LIBRARIES[request.param]
    if library() is None:
        pytest.skip(f"{request.param} cannot decode JPEGs here (not installed, or built for another torch)")
    monkeypatch.setattr(jpeg, "LIBRARIES", (library,))
    jpeg.decoder_for.cache_clear()
    with expected_warnings(request.param):  # its choice decodes a tiny JPEG
        chosen = jpeg.decoder_for(CPU)
    yield chosen
    jpeg.decoder_for.cache_clear()  # the next test decides afresh, with every library


@contextlib.contextmanager
def expected_warnings(library: str):
    """No DeprecationWarning or FutureWarning (errors here), except torchvision's own from 0.29 on: that one is
    expected, and is why the project prefers TorchCodec."""
    if library == "torchvision" and TORCHVISION >= (0, 29):
        with pytest.warns(DeprecationWarning, match="TorchCodec"):
            yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", FutureWarning)
        yield


def _pixels(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


def test_every_kind_of_jpeg_decodes_to_pillows_pixels(kinds_data, decoder):
    """Baseline, progressive, grayscale and EXIF-turned JPEGs, decoded in one batch by the device path, are
    Pillow's upright RGB to the last level (maximum difference 0); a CMYK one is left to the worker's Pillow."""
    files = {kind: kinds_data / "train" / "a" / f"{kind}.jpg" for kind in KINDS}
    samples = {kind: jpeg.read_encoded(str(path)) for kind, path in files.items()}
    assert isinstance(samples.pop("cmyk"), Image.Image)  # decoded in the worker, as on the CPU path
    with expected_warnings(decoder.name.split()[0]):
        decoded = jpeg.decode_jpegs([sample.data for sample in samples.values()], CPU)
    differences = {}
    for (kind, sample), image in zip(samples.items(), decoded):
        pillow = _pixels(load_rgb(files[kind]))
        assert image.dtype == torch.uint8 and image.shape == pillow.shape, kind
        assert tuple(image.shape[1:]) == sample.size, kind  # the size the worker drew the crop for
        differences[kind] = (image.int() - pillow.int()).abs().max().item()
    assert differences == dict.fromkeys(KINDS[:-1], 0)


def _batches(data, decode: str) -> tuple[list[torch.Tensor], str]:
    """Every batch of one training epoch and the validation pass (normalised, on the CPU), and why decode is where."""
    cfg = TrainConfig(data=str(data), image_size=24, batch_size=6, workers=1, pretrained=False, augment="none",
                      decode=decode, seed=3)
    loaders = build_loaders(cfg, CPU, plugins=PLUGINS)
    hw = Hardware.create(CPU, mean=loaders.preprocessing.mean, std=loaders.preprocessing.std)
    loaders.train_loader.sampler.set_epoch(1)
    try:
        seen = [hw.batch(images, targets)[0] for loader in (loaders.train_loader, loaders.val_loader)
                for images, targets in loader]
    finally:
        loaders.train_loader.close()
        loaders.val_loader.close()
    return seen, loaders.decode_reason


def test_decode_device_on_the_cpu_gives_the_pillow_paths_batches(kinds_data, decoder):
    """`--decode device` forced on the CPU, with a loader worker: every batch equals `--decode cpu`'s exactly, and
    the reason the run records names the decoder."""
    on_cpu, _ = _batches(kinds_data, "cpu")
    with expected_warnings(decoder.name.split()[0]):
        on_device, reason = _batches(kinds_data, "device")
    assert reason == f"--decode device; {decoder.name}"
    assert len(on_device) == len(on_cpu) == 4 + 4  # 24 images a split (12 kinds, 2 classes) in batches of 6
    for ours, theirs in zip(on_device, on_cpu):
        assert torch.equal(ours, theirs)


def test_torchcodec_is_chosen_where_it_loads_and_the_run_says_so(kinds_data):
    """With TorchCodec installed for this torch it decodes, and the start-up line and config.json's machine record
    name it with its version."""
    if jpeg.torchcodec_decoder() is None:
        pytest.skip("TorchCodec is not installed here (or not for this torch)")
    import torchcodec

    jpeg.decoder_for.cache_clear()
    name = jpeg.decoder_for(CPU).name
    assert name == f"torchcodec {torchcodec.__version__}"
    cfg = TrainConfig(data=str(kinds_data), image_size=24, batch_size=6, workers=0, pretrained=False, decode="device",
                      parallel="none")  # whatever the bake's multi_gpu answer made the default
    run = Run(cfg, CPU, plugins=PLUGINS)
    run.close()
    assert run.machine()["decode_reason"] == f"--decode device; {name}"
    assert f"images decoded on the device (--decode device; {name})" in run.machine_notes()[0]


@pytest.mark.parametrize("failure", [ImportError, OSError, RuntimeError])
def test_a_torchcodec_that_fails_to_load_leaves_torchvision_decoding(tmp_path, monkeypatch, failure):
    """Absent (ImportError), or built for another torch (its C++ operators fail to load: OSError, or the
    RuntimeError TorchCodec raises itself), TorchCodec is passed over and torchvision's decoder is used."""
    fake = tmp_path / "torchcodec"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"raise {failure.__name__}('as a TorchCodec for another torch fails')\n")
    for module in [name for name in sys.modules if name.split(".")[0] == "torchcodec"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.syspath_prepend(str(tmp_path))
    jpeg.decoder_for.cache_clear()
    try:
        assert jpeg.torchcodec_decoder() is None
        with expected_warnings("torchvision"):
            chosen = jpeg.decoder_for(CPU)
        assert chosen is not None and chosen.name.startswith(f"torchvision {torchvision.__version__}")
        assert choose_decode("device", CPU, [], cached=False) == ("device", f"--decode device; {chosen.name}")
    finally:
        jpeg.decoder_for.cache_clear()
