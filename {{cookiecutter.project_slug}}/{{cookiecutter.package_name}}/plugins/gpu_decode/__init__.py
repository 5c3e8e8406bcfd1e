"""The gpu_decode answer: `--decode device`, the loader workers read a JPEG's bytes and the device decodes the whole
batch (TorchCodec's `decode_jpeg(list, device=...)`, else torchvision's: jpeg.decoder_for), then resizes, crops and
flips it there. The start-up line and config.json's machine record name the decoder (`decode_reason`).
Why: decoding and resizing an ImageNet-sized JPEG costs a CPU core 10-15 ms, so a host feeds a fast GPU
only a fraction of the images it can train on. Reading the bytes and the header costs well under 1 ms.

Exact resume holds as on the CPU path: the worker draws each sample's parameters with the recipe's own
transforms (`make_params`, and the coin of a random flip) under the sample's seed (sampling.SeededSamples),
in the order the CPU path draws them, and the device applies them with the same transforms (`transform`).
So the crops and flips are the CPU path's; the pixels are too where the decoder and resize kernels are the
same (on the CPU, TorchCodec's or torchvision's libjpeg-turbo standing in for the device's decoder: equal to
Pillow's; see tests/plugins/gpu_decode/test_decoders.py). On CUDA nvJPEG's inverse DCT and colour conversion
and the float resize kernel round differently: a few levels of 255 at most in a pixel, under one level on average.

`--decode auto` (the default) decodes on the device for mostly-JPEG data on CUDA, else in the workers.
"""

from __future__ import annotations

from ...deferred import deferred
from .. import Plugin

# Its choice (--decode device) is read before torch loads (ARCHITECTURE.md, "Flags first, then torch"); the
# decoding itself loads when the run first asks for it
decoding = deferred(".decoding", __package__)
jpeg = deferred(".jpeg", __package__)


class GpuDecodePlugin(Plugin):
    """--decode device (and auto's choice of it): JPEGs decoded, resized, cropped and flipped on the GPU."""

    name = "gpu_decode"

    def choices(self) -> dict[str, list[str]]:
        return {"decode": ["device"]}

    def unavailable(self, field: str, value: str, device) -> str | None:
        if jpeg.decoder_for(device) is None:  # before the data is listed: MPS, XPU, a build without nvJPEG
            return decoding.no_decoder(device)
        return None

    def loaders(self, plan) -> None:
        """Where the run's images are decoded (plan.decode and why); for the device, the workers hand over bytes."""
        cfg = plan.cfg
        files = decoding.file_names(plan.datasets[True])
        plan.decode, plan.decode_reason = decoding.choose_decode(cfg.decode, plan.device, files, cfg.cache_images)
        if plan.decode != "device":
            return
        for train, dataset in plan.datasets.items():  # inside SkipUnreadable (no cache here)
            dataset.dataset = decoding.use_device_decode(dataset.dataset, plan.geometry, train)
            plan.collate[train] = decoding.CollateEncoded(dataset.dataset.geometry)


PLUGIN = GpuDecodePlugin()
