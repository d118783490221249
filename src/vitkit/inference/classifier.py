"""A checkpoint as an image classifier: `vitkit predict` in Python.

    clf = vitkit.Classifier.load("runs/clothes")                  # any checkpoint: its class names and preprocessing
    clf.predict(["shirt.png", Image.open("boot.jpg")], top=3)     # [[("shirt", 0.91), ("t-shirt", 0.05), ...], ...]
    clf.embed(["shirt.png"], layer=-1, pool="cls")                # (1, D) features of a chosen layer

Images are files, PIL images of any mode, uint8 arrays (H, W) / (H, W, C) or uint8 tensors (H, W) / (C, H, W) as
torchvision.io.read_image gives them (a (B, C, H, W) tensor is a batch of them); each is converted to the model's
channels, resized and centre-cropped as the checkpoint's preprocessing says (its crop_pct, crop_mode and
interpolation: a Hugging Face preprocessor_config.json's or timm's pretrained_cfg where it came from there), exactly
as `vitkit eval` and `vitkit predict` read files. With `keep_aspect` (a `dynamic_img_size` model) each image keeps its
aspect ratio instead, at about the model's number of pixels, its sides rounded to the patch size (`images.aspect_size`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from PIL import Image

from vitkit.checkpoint import load_with_metadata, refuse_untrained_head
from vitkit.checkpoint.native import is_multi_label
from vitkit.data.augment import eval_transform
from vitkit.data.images import aspect_size, crop_of, image_pixels, load_image, open_image
from vitkit.devices import pick_device
from vitkit.errors import ConfigError, DataError
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
        keep_aspect: bool = False,
        multi_label: bool = False,
    ):
        c = model.config
        if keep_aspect:
            refuse_fixed_size(c)
        self.keep_aspect = keep_aspect
        self.multi_label = multi_label  # a sigmoid per class: `labels` gives every class over a threshold
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
        keep_aspect: bool = False,
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
            keep_aspect=keep_aspect,
            multi_label=is_multi_label(meta),
        )

    def pixels(self, image: ImageLike) -> torch.Tensor:
        """(C, H, W) uint8: the model's input before normalisation. A file that cannot be read is a DataError naming it."""
        c = self.model.config
        if isinstance(image, torch.Tensor):
            if not _is_pixels(image.dtype, image.shape, 0):
                raise DataError(
                    f"image tensor: expected uint8 (H, W) or (C, H, W) with C 1, 3 or 4, as torchvision.io.read_image "
                    f"gives them, or floats in [0, 1] (ToTensor's), got {str(image.dtype).replace('torch.', '')} "
                    f"{tuple(image.shape)}"
                )
            image = image.detach().cpu().float().numpy() if image.is_floating_point() else image.cpu().numpy()
            image = image if image.ndim == 2 else image.transpose(1, 2, 0)
        if isinstance(image, np.ndarray):
            if not _is_pixels(image.dtype, image.shape, 2):
                raise DataError(
                    f"image array: expected uint8 (H, W) or (H, W, 1|3|4), or floats in [0, 1], got {image.dtype} "
                    f"{image.shape}"
                )
            image = _to_uint8(image)
            image = Image.fromarray(image[..., 0] if image.ndim == 3 and image.shape[2] == 1 else image)
        if isinstance(image, Image.Image):
            pixels = image_pixels(image, c.in_chans, self._size(image), self.crop_pct, background=c.background)
            return torch.from_numpy(pixels.copy())
        if self.keep_aspect:
            return aspect_pixels(image, c, self.crop_pct)
        return torch.from_numpy(
            load_image(image, c.in_chans, c.image_size, self.crop_pct, background=c.background).copy()
        )

    def _size(self, image: Image.Image) -> tuple[int, int]:
        """The (H, W) the image is read at: the model's, or with keep_aspect its own aspect ratio on the patch grid."""
        c = self.model.config
        return aspect_size(*image.size, c.image_size, c.total_patch_size) if self.keep_aspect else c.image_size

    def top(self, pixels: torch.Tensor | Sequence[torch.Tensor], k: int = 5) -> list[list[tuple[str, float]]]:
        """The `k` likeliest (class name, probability) of each image of a uint8 (B, C, H, W) batch of `pixels` (or a
        list of (C, H, W) images, of one size or several with keep_aspect)."""
        return [[(self.class_names[i], p) for p, i in zip(ps, ix)] for ps, ix in self._ranked(pixels, k)]

    def labels(
        self, pixels: torch.Tensor | Sequence[torch.Tensor], threshold: float = 0.5
    ) -> list[list[tuple[str, float]]]:
        """Every (class name, probability) of at least `threshold` of each image of `pixels` (as `top` takes them),
        the likeliest first: for a multi-label model, any number of classes per image."""
        ranked = self._ranked(pixels, len(self.class_names))
        return [[(self.class_names[i], p) for p, i in zip(ps, ix) if p >= threshold] for ps, ix in ranked]

    def _ranked(self, pixels, k: int) -> list[tuple[list[float], list[int]]]:
        """(probabilities, class indices) of the `k` likeliest classes of each image, in order: a sigmoid per class
        for a multi-label model, else the softmax."""
        ranked = []
        for group in same_size_runs(pixels):
            probs, index = predict(
                self.model, group.to(self.device), k=k, crop_pct=self.crop_pct, runner=self.runner,
                keep_size=self.keep_aspect, multi_label=self.multi_label,
            )  # fmt: skip
            ranked += zip(probs.tolist(), index.tolist())
        return ranked

    @torch.no_grad()
    def embed(
        self,
        images: ImageLike | Sequence[ImageLike],
        *,
        layer: int = -1,
        pool: str | None = None,
        norm: bool = True,
        batch_size: int = 32,
    ) -> torch.Tensor:
        """One feature vector per image, (B, D) float32, from the fp32 model: the tokens after layer `layer` (0 the
        first, -1 the last; a BiT's levels: 0 its stem, s its stage s), normed by the final LayerNorm (`norm`; for a
        BiT, its final GN + ReLU on the last stage), pooled by `pool`: "cls" the class token, "mean" the mean of the
        patch tokens (a BiT: of its map), "dist" DeiT's distillation token. Default: "cls" where the model classifies
        from it, else "mean". layer=-1 with the default pool is what the head reads (before any pre-logits layer;
        a distilled model's second head reads "dist")."""
        c = self.model.config
        token = getattr(c, "classifier", None) == "token"  # a ViT with a class token (a BiT has none)
        pool = pool or ("cls" if token else "mean")
        pools = ("cls", "dist", "mean") if getattr(c, "distilled", False) else ("cls", "mean") if token else ("mean",)
        if pool not in pools:
            raise ConfigError(
                f"pool: expected {' or '.join(pools)}{'' if token else ' (the model has no class token)'}, got {pool!r}"
            )
        vit = hasattr(self.model, "input_grid")
        levels = self.model.levels if vit else 1 + len(self.model.stages)  # a BiT: its stem and stages
        if not isinstance(layer, int) or not -levels <= layer < levels:
            raise ConfigError(f"layer: expected a layer from {-levels} to {levels - 1} (-1: the last), got {layer!r}")
        images = self._images(images)
        vectors = []
        for start in range(0, len(images), batch_size):
            for group in same_size_runs([self.pixels(image) for image in images[start : start + batch_size]]):
                vectors.append(self._pooled(group, layer, pool, norm))
        return torch.cat(vectors) if vectors else torch.empty(0)

    def _pooled(self, pixels: torch.Tensor, layer: int, pool: str, norm: bool) -> torch.Tensor:
        """(B, D) features of layer `layer` of uint8 images (B, C, H, W), pooled by `pool`."""
        c = self.model.config
        size = tuple(pixels.shape[-2:]) if self.keep_aspect else c.image_size
        x = eval_transform(pixels.to(self.device), size, self.crop_pct, c.mean, c.std)
        if not hasattr(self.model, "input_grid"):  # a BiT ResNet: feature maps (B, C, h, w)
            (fmap,) = self.model.forward_intermediates(x, [layer], norm=norm, intermediates_only=True, stop_early=True)
            return fmap.float().mean(dim=(2, 3)).cpu()
        ((patches, prefix),) = self.model.forward_intermediates(
            x, [layer], norm=norm, output_fmt="NLC", return_prefix_tokens=True, intermediates_only=True, stop_early=True
        )
        pooled = prefix[:, 0] if pool == "cls" else prefix[:, 1] if pool == "dist" else patches.mean(dim=1)
        return pooled.float().cpu()

    def predict(
        self, images: ImageLike | Sequence[ImageLike], top: int = 5, batch_size: int = 32
    ) -> list[list[tuple[str, float]]]:
        """The `top` likeliest (class name, probability) of each image, in order; one image gives a list of one."""
        images = self._images(images)
        answers = []
        for start in range(0, len(images), batch_size):
            answers += self.top([self.pixels(image) for image in images[start : start + batch_size]], top)
        return answers

    @staticmethod
    def _images(images: ImageLike | Sequence[ImageLike]) -> Sequence[ImageLike]:
        """The images given, as a sequence: one image is a list of one; a folder is refused."""
        if isinstance(images, (str, os.PathLike, Image.Image)) or (
            isinstance(images, (torch.Tensor, np.ndarray)) and images.ndim < 4
        ):
            images = [images]  # one image; a (B, C, H, W) tensor or a (B, H, W, C) array is B of them
        elif not isinstance(images, (Sequence, torch.Tensor)):
            images = list(images)  # any iterable: a generator, Path.glob(...)
        for image in images:
            # one answer per image given: a folder is none
            if isinstance(image, (str, os.PathLike)) and os.path.isdir(image):
                raise DataError(
                    f"{image}: is a folder; pass its images (e.g. sorted(Path(folder).glob('*.jpg'))), or run "
                    f"`vitkit predict CHECKPOINT {image}`, which names each image it answers for"
                )
        return images


def _is_pixels(dtype, shape, channel_axis: int) -> bool:
    """Whether an array or tensor of `dtype` and `shape` is one image: (H, W), or 1, 3 or 4 channels on
    `channel_axis`; uint8, or floats (in [0, 1], checked on reading)."""
    floats = dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) or (
        isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.floating)
    )
    return (dtype in (torch.uint8, np.uint8) or floats) and (
        len(shape) == 2 or len(shape) == 3 and shape[channel_axis] in (1, 3, 4)
    )


def _to_uint8(image: np.ndarray) -> np.ndarray:
    """uint8 pixels of an image array: as they are, or floats in [0, 1] times 255, rounded. Floats outside [0, 1]
    (normalised images) are a DataError."""
    if image.dtype == np.uint8:
        return image
    if not np.isfinite(image).all():
        raise DataError("image: float pixels must be in [0, 1], got NaN or infinite values")
    low, high = float(image.min()), float(image.max())
    if not (0.0 <= low and high <= 1.0):
        fix = (
            "divide them by 255, or pass uint8"
            if low >= 0 and high <= 255
            else "pass the image before normalisation (the classifier normalises with the model's mean and std)"
        )
        raise DataError(f"image: float pixels must be in [0, 1], got values from {low:.3g} to {high:.3g}; {fix}")
    return np.round(image.astype(np.float32) * 255).astype(np.uint8)


def refuse_fixed_size(c) -> None:
    """A ConfigError where a model of config `c` takes one image size: keeping images' aspect ratios needs any size."""
    if not getattr(c, "dynamic_img_size", False):
        raise ConfigError(
            f"keep_aspect (--keep-aspect): the model takes {c.image_size[0]}x{c.image_size[1]} images only; keeping each "
            "image's aspect ratio needs a model with model.dynamic_img_size=true (set it in the checkpoint's config.json, "
            "or train or fine-tune with it), or leave the aspect ratio to the centre crop"
        )


def aspect_pixels(source, c, crop_pct: float) -> torch.Tensor:
    """(C, H, W) uint8 of an image file or shard record at its own aspect ratio on the patch grid (`aspect_size`)."""
    image = open_image(source, c.in_chans, background=c.background)
    size = aspect_size(*image.size, c.image_size, c.total_patch_size)
    return torch.from_numpy(image_pixels(image, c.in_chans, size, crop_pct, name=source).copy())


def same_size_runs(pixels: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Images (C, H, W) as batches of consecutive ones of one size, in order; a (B, C, H, W) batch as it is."""
    if isinstance(pixels, torch.Tensor):
        return [pixels]
    runs: list[list[torch.Tensor]] = []
    for image in pixels:
        if runs and runs[-1][0].shape == image.shape:
            runs[-1].append(image)
        else:
            runs.append([image])
    return [torch.stack(run) for run in runs]
