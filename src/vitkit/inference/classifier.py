"""A checkpoint as an image classifier: `vitkit predict` in Python.

    clf = vitkit.Classifier.load("runs/clothes")                  # any checkpoint: its class names and preprocessing
    clf.predict(["shirt.png", Image.open("boot.jpg")], top=3)     # [[("shirt", 0.91), ("t-shirt", 0.05), ...], ...]

Images are files, PIL images of any mode, uint8 arrays (H, W) / (H, W, C) or uint8 tensors (H, W) / (C, H, W) as
torchvision.io.read_image gives them (a (B, C, H, W) tensor is a batch of them); each is converted to the model's
channels, resized and centre-cropped as the checkpoint's preprocessing says (its crop_pct, crop_mode and
interpolation: a Hugging Face preprocessor_config.json's or timm's pretrained_cfg where it came from there), exactly
as `vitkit eval` and `vitkit predict` read files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from PIL import Image

from vitkit.checkpoint import load_with_metadata, refuse_untrained_head
from vitkit.data.images import crop_of, image_pixels, load_image
from vitkit.devices import pick_device
from vitkit.errors import DataError
from vitkit.inference.precision import prepare
from vitkit.inference.predict import calibration_images, predict

ImageLike = str | os.PathLike | Image.Image | np.ndarray | torch.Tensor


class Classifier:
    """A model with its class names and preprocessing, run at a precision (`vitkit.inference.precision`) on a device."""

    def __init__(
        self,
        model: torch.nn.Module,
        class_names: Sequence[str] | None = None,
        *,
        crop_pct: float = 1.0,  # or a data.images.Crop: crop_pct with crop_mode and interpolation
        precision: str = "fp32",
        device: str | torch.device = "cpu",
        calibration: Iterable[torch.Tensor] | None = None,
    ):
        c = model.config
        self.class_names = list(class_names) if class_names else [str(i) for i in range(c.num_classes)]
        if len(self.class_names) != c.num_classes:
            raise DataError(f"class_names: {len(self.class_names)} names for a model of {c.num_classes} classes")
        self.crop_pct, self.device = crop_pct, torch.device(device)
        self.model = model.to(self.device).eval()
        # neither compiling nor building vitkit's fp32 kernels (once per machine) pays for a few images
        self.runner = prepare(
            self.model, precision, device=self.device, compile=False, kernels=False, calibration=calibration
        )

    @classmethod
    def load(
        cls,
        checkpoint: str | os.PathLike,
        *,
        precision: str = "fp32",
        device: str = "auto",
        calibration: int = 256,
        calibration_data: str | os.PathLike | None = None,
        data_flag: str = "calibration_data=PATH",
    ) -> Classifier:
        """Any checkpoint (run directory, vitkit, .npz, timm, Hugging Face) with the class names and crop_pct it holds;
        int8 calibrates on `calibration` training images of `calibration_data` (any data vitkit reads; default: the
        data the checkpoint records it was trained on). `data_flag`: how errors name `calibration_data`."""
        model, meta = load_with_metadata(checkpoint)
        refuse_untrained_head(meta, checkpoint, model)
        crop_pct = crop_of(meta)  # the source's preprocessing: resize (keeping the aspect or not), filter, crop
        images = None
        if precision == "int8":
            from vitkit.data import DataSpec

            c = model.config
            spec = DataSpec.from_checkpoint(
                meta, checkpoint, data=calibration_data, flag=f"{data_flag} (int8 calibrates on its training images)"
            )
            train = spec.open("train", channels=c.in_chans, image_size=c.image_size[0])
            images = calibration_images(train, model, n=calibration, crop_pct=crop_pct)
        return cls(
            model,
            meta.get("class_names"),
            crop_pct=crop_pct,
            precision=precision,
            device=pick_device(device),
            calibration=images,
        )

    def pixels(self, image: ImageLike) -> torch.Tensor:
        """(C, H, W) uint8: the model's input before normalisation. A file that cannot be read is a DataError naming it."""
        c = self.model.config
        if isinstance(image, torch.Tensor):
            if (
                image.dtype != torch.uint8
                or image.ndim not in (2, 3)
                or (image.ndim == 3 and image.shape[0] not in (1, 3, 4))
            ):
                raise DataError(
                    f"image tensor: expected uint8 (H, W) or (C, H, W) with C 1, 3 or 4, as torchvision.io.read_image "
                    f"gives them, got {str(image.dtype).replace('torch.', '')} {tuple(image.shape)}"
                )
            image = image.cpu().numpy()
            image = image if image.ndim == 2 else image.transpose(1, 2, 0)
        if isinstance(image, np.ndarray):
            if (
                image.dtype != np.uint8
                or image.ndim not in (2, 3)
                or (image.ndim == 3 and image.shape[2] not in (1, 3, 4))
            ):
                raise DataError(f"image array: expected uint8 (H, W) or (H, W, 1|3|4), got {image.dtype} {image.shape}")
            image = Image.fromarray(image[..., 0] if image.ndim == 3 and image.shape[2] == 1 else image)
        if isinstance(image, Image.Image):
            return torch.from_numpy(image_pixels(image, c.in_chans, c.image_size, self.crop_pct).copy())
        return torch.from_numpy(load_image(image, c.in_chans, c.image_size, self.crop_pct).copy())

    def top(self, pixels: torch.Tensor, k: int = 5) -> list[list[tuple[str, float]]]:
        """The `k` likeliest (class name, probability) of each image of a uint8 (B, C, H, W) batch of `pixels`."""
        probs, index = predict(self.model, pixels.to(self.device), k=k, crop_pct=self.crop_pct, runner=self.runner)
        return [[(self.class_names[i], p) for p, i in zip(ps, ix)] for ps, ix in zip(probs.tolist(), index.tolist())]

    def predict(
        self, images: ImageLike | Sequence[ImageLike], top: int = 5, batch_size: int = 32
    ) -> list[list[tuple[str, float]]]:
        """The `top` likeliest (class name, probability) of each image, in order; one image gives a list of one."""
        if isinstance(images, (str, os.PathLike, Image.Image, np.ndarray)) or (
            isinstance(images, torch.Tensor) and images.ndim < 4
        ):
            images = [images]  # one image; a (B, C, H, W) tensor is B of them
        elif not isinstance(images, (Sequence, torch.Tensor)):
            images = list(images)  # any iterable: a generator, Path.glob(...)
        for image in images:
            if isinstance(image, (str, os.PathLike)) and os.path.isdir(
                image
            ):  # one answer per image given: a folder is none
                raise DataError(
                    f"{image}: is a folder; pass its images (e.g. sorted(Path(folder).glob('*.jpg'))), or run "
                    f"`vitkit predict CHECKPOINT {image}`, which names each image it answers for"
                )
        answers = []
        for start in range(0, len(images), batch_size):
            answers += self.top(torch.stack([self.pixels(image) for image in images[start : start + batch_size]]), top)
        return answers
