"""`timm` and `torchvision` CNNs with random weights, traced with ``ov.convert_model(model, example_input=...)``.

Models: ConvNeXt, EfficientNet and MobileNetV3 from `timm`, ResNet-50 from `torchvision`. ``size="full"``
is the published network (ConvNeXt-T, EfficientNet-B0, MobileNetV3-Large 1.0, ResNet-50; 224x224 images,
1,000 classes); ``size="small"`` keeps each architecture's blocks with fewer and narrower stages (one block
per stage, a quarter of the channels where the library allows it; 64x64 images, 10 classes).

Weights are the libraries' own random initialisation, seeded. BatchNorm statistics are then set as training
would set them, from data: a few forward passes in training mode over seeded standard-normal images (a
cumulative average, ``momentum=None``). With the initial statistics (mean 0, variance 1) no BatchNorm
normalises, and the residual sums of a random ResNet-50 grow its activations block after block; with
data statistics every layer sees values of order one, as in a trained network. ConvNeXt keeps timm's layer
scale (1e-6 at init), so its blocks start near the identity as in timm.

Assumptions: torch, torchvision and timm are installed (the ``zoo`` extra), imported only when a builder runs;
inputs are one image in [1, 3, H, W]; batch and spatial dimensions stay dynamic after conversion.
"""

from __future__ import annotations

import warnings
from typing import Any

import openvino as ov

__all__ = ["BUILDERS", "IMAGE_SIZE", "convnext", "efficientnet", "mobilenetv3", "resnet50"]

IMAGE_SIZE = {"small": 64, "full": 224}
_CLASSES = {"small": 10, "full": 1000}
_CALIBRATION_BATCHES = 4


def _check(size: str) -> None:
    if size not in IMAGE_SIZE:
        from bisect_ov.core.errors import InputError

        raise InputError(f"Unknown zoo size '{size}'. Available: {sorted(IMAGE_SIZE)}.")


def _calibrate_batchnorm(model, size: str, seed: int) -> None:
    """Running statistics from seeded images, as training sets them; then eval mode."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    generator = torch.Generator().manual_seed(seed + 1)
    model.train()
    with torch.no_grad():
        for _ in range(_CALIBRATION_BATCHES):
            model(torch.randn(4, 3, IMAGE_SIZE[size], IMAGE_SIZE[size], generator=generator))
    model.eval()


def _convert(model, size: str, seed: int) -> tuple[ov.Model, dict]:
    import torch

    _calibrate_batchnorm(model, size, seed)
    shape = [1, 3, IMAGE_SIZE[size], IMAGE_SIZE[size]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = ov.convert_model(model.eval(), example_input=torch.randn(*shape))
    return converted, {"inputs": {converted.inputs[0].get_any_name(): {"shape": shape}},
                       "converter": "ov.convert_model(example_input=...)"}


def _seeded(seed: int) -> Any:
    import torch

    torch.manual_seed(seed)


def convnext(size: str = "small", seed: int = 0) -> tuple[ov.Model, dict]:
    """timm ConvNeXt: ConvNeXt-T in full size; one block per stage, widths 16-128, in small size."""
    import timm
    from timm.models.convnext import ConvNeXt

    _check(size)
    _seeded(seed)
    if size == "full":
        model = timm.create_model("convnext_tiny", pretrained=False)
    else:
        model = ConvNeXt(depths=(1, 1, 1, 1), dims=(16, 32, 64, 128), num_classes=_CLASSES[size])
    return _convert(model, size, seed)


def efficientnet(size: str = "small", seed: int = 0) -> tuple[ov.Model, dict]:
    """timm EfficientNet-B0; in small size a quarter of its channels and depth."""
    import timm
    from timm.models import efficientnet as effnet

    _check(size)
    _seeded(seed)
    if size == "full":
        model = timm.create_model("efficientnet_b0", pretrained=False)
    else:
        model = effnet._gen_efficientnet("efficientnet_b0", channel_multiplier=0.25, depth_multiplier=0.25,
                                         pretrained=False, num_classes=_CLASSES[size])
    return _convert(model, size, seed)


def mobilenetv3(size: str = "small", seed: int = 0) -> tuple[ov.Model, dict]:
    """timm MobileNetV3: Large 1.0 in full size, Small 0.5 in small size (hard-swish, squeeze-excite)."""
    import timm

    _check(size)
    _seeded(seed)
    name = "mobilenetv3_large_100" if size == "full" else "mobilenetv3_small_050"
    return _convert(timm.create_model(name, pretrained=False, num_classes=_CLASSES[size]), size, seed)


def resnet50(size: str = "small", seed: int = 0) -> tuple[ov.Model, dict]:
    """torchvision ResNet-50; in small size its bottleneck blocks, one per stage, a quarter as wide inside."""
    import torchvision
    from torchvision.models.resnet import Bottleneck, ResNet

    _check(size)
    _seeded(seed)
    if size == "full":
        model = torchvision.models.resnet50(weights=None)
    else:
        model = ResNet(Bottleneck, [1, 1, 1, 1], num_classes=_CLASSES[size], width_per_group=16)
    return _convert(model, size, seed)


BUILDERS = {"convnext": convnext, "efficientnet": efficientnet, "mobilenetv3": mobilenetv3, "resnet50": resnet50}
