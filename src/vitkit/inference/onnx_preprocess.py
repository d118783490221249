"""vitkit's image preprocessing as ONNX ops, joined in front of a model's ONNX export (`vitkit export --preprocess`).

The joined graph takes what an image decoder gives: uint8 pixels, NHWC (batch, height, width, channels), any height
and width (one size per batch), the model's channels (RGB, or L for a one-channel model) or those and an alpha
channel (RGBA, LA). Inside it, as `vitkit predict` reads a file (`data.images`):

1. alpha composited on the model's background (`model.background`), rounded to uint8 levels;
2. resized to cover the input size / crop_pct keeping the aspect ratio (`scaled_size`; both sides to it where the
   checkpoint's crop_mode is squash), with the checkpoint's filter (bilinear or bicubic, antialiased when shrinking,
   as PIL's resize), rounded to uint8 levels;
3. the centre cut to the input size;
4. scaled to [0, 1] and normalised by the model's mean and std.

The graph resizes as PIL does, in two antialiased passes (width, then height), each rounded half up to uint8; PIL's
fixed-point weights, and the order of passes it picks for some sizes, leave a pixel a level apart here and there,
the probabilities close (tests/inference/test_export.py states the tolerance).
"""

from __future__ import annotations

from vitkit.data.images import background_bytes, shorter_side
from vitkit.errors import ConfigError

INPUT = "images"  # the joined graph's input: uint8 NHWC
_PIXELS = "preprocess/pixel_values"  # what the model graph reads in its place: normalised float NCHW
FILTERS = {"bilinear": ("linear", -0.75), "bicubic": ("cubic", -0.5)}  # PIL filter: ONNX Resize mode, cubic's a (PIL's)


def describe(config, crop) -> dict:
    """The metadata a joined graph adds: what its input is and what it does to it."""
    channels = "L" if config.in_chans == 1 else "RGB"
    return {
        "input": f"uint8 NHWC images, any height and width (one per batch): {channels} or {channels}A",
        "preprocess_in_graph": (
            "alpha composited on background; resized to cover input_size / crop_pct "
            f"({'both sides' if crop.mode == 'squash' else 'keeping the aspect ratio'}, {crop.interpolation}, "
            "antialiased); centre crop of input_size; / 255, then (x - mean) / std"
        ),
    }


def join(model_proto, config, crop):
    """`model_proto` (vitkit's ONNX export, input "images": normalised float NCHW) with the preprocessing in front of
    it: its input "images" is then uint8 NHWC (the module's docstring). `crop` is the checkpoint's `Crop`."""
    from onnx import TensorProto, helper

    if crop.interpolation not in FILTERS:
        raise ConfigError(
            f"--preprocess: the checkpoint resizes with {crop.interpolation}; the ONNX graph does "
            f"{' or '.join(FILTERS)}; export without --preprocess and resize as it says"
        )
    opset = next(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 18:  # Resize's antialias and axes
        raise ConfigError(f"--preprocess: the model graph is opset {opset}; the preprocessing needs 18 or later")
    graph = model_proto.graph
    (given,) = [i for i in graph.input if i.name == INPUT]
    for node in graph.node:
        node.input[:] = [_PIXELS if name == INPUT else name for name in node.input]
    nodes = [*_nodes(config, crop), *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.input.remove(given)
    graph.input.insert(
        0, helper.make_tensor_value_info(INPUT, TensorProto.UINT8, ["batch", "height", "width", "channels"])
    )
    return model_proto


def _nodes(config, crop) -> list:
    """The preprocessing nodes, from "images" (uint8 NHWC) to `_PIXELS` (float NCHW at the input size)."""
    import numpy as np
    from onnx import helper, numpy_helper

    c, (height, width) = config.in_chans, config.image_size
    nodes, counter = [], [0]

    def const(value, dtype=np.int64) -> str:
        counter[0] += 1
        name = f"preprocess/const_{counter[0]}"
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype))))
        return name

    def op(kind: str, *inputs: str, **attrs) -> str:
        counter[0] += 1
        name = f"preprocess/{kind.lower()}_{counter[0]}"
        nodes.append(helper.make_node(kind, list(inputs), [name], name=name, **attrs))
        return name

    # 1. an alpha channel: padded with 255 (opaque) where the input has none, then composited on the background
    shape = op("Shape", INPUT)
    channels = op("Slice", shape, const([3]), const([4]))
    pads = op("Concat", const([0] * 7), op("Sub", const([c + 1]), channels), axis=0)
    pixels = op("Cast", op("Pad", INPUT, pads, const(255, np.uint8)), to=1)  # float
    color = op("Slice", pixels, const([0]), const([c]), const([3]))
    alpha = op("Slice", pixels, const([c]), const([c + 1]), const([3]))
    fill = background_bytes(config.background)
    fill = np.asarray(fill * c if len(fill) == 1 else fill, np.float32)
    over = op(
        "Add", op("Mul", color, alpha), op("Mul", const(fill, np.float32), op("Sub", const(255.0, np.float32), alpha))
    )
    x = op("Transpose", op("Round", op("Div", over, const(255.0, np.float32))), perm=[0, 3, 1, 2])  # NCHW
    sizes = _scaled_sizes(op, const, shape, config, crop)
    # as PIL resizes: the width, then the height, each pass rounded half up to uint8 levels
    half = const(0.5, np.float32)
    mode, cubic_a = FILTERS[crop.interpolation]
    for axis, side in (
        (3, op("Slice", sizes, const([1]), const([2]))),
        (2, op("Slice", sizes, const([0]), const([1]))),
    ):
        x = op(
            "Resize", x, "", "", side, axes=[axis], mode=mode, cubic_coeff_a=cubic_a, antialias=1, exclude_outside=1,
            coordinate_transformation_mode="half_pixel",
        )  # fmt: skip
        x = op("Clip", op("Floor", op("Add", x, half)), const(0.0, np.float32), const(255.0, np.float32))
    # 3. the centre crop
    start = op("Div", op("Sub", sizes, const([height, width])), const([2]))
    x = op("Slice", x, start, op("Add", start, const([height, width])), const([2, 3]))
    # 4. [0, 1], then the model's mean and std
    mean = const(np.asarray(config.mean, np.float32).reshape(1, c, 1, 1), np.float32)
    std = const(np.asarray(config.std, np.float32).reshape(1, c, 1, 1), np.float32)
    x = op("Div", op("Sub", op("Div", x, const(255.0, np.float32)), mean), std)
    nodes.append(helper.make_node("Identity", [x], [_PIXELS], name=_PIXELS))
    return nodes


CHECK_SIZES = ((37, 23), (19, 44), (9, 13))  # (height, width): tall, wide, smaller than the input; with alpha last
TOLERANCE = 1e-2  # the default largest difference from `vitkit predict`'s probabilities (see the module's docstring)


def check_images(channels: int, seed: int = 0) -> list:
    """Smooth seeded uint8 images (H, W, C) of odd sizes, as photos are (noise upsampled, grain on top): the model's
    channels, the last one with a varying alpha channel too."""
    import numpy as np
    from PIL import Image

    rng, images = np.random.default_rng(seed), []
    for i, (h, w) in enumerate(CHECK_SIZES):
        c = channels + (i == len(CHECK_SIZES) - 1)
        coarse = rng.integers(0, 256, (4, 4, c), dtype=np.uint8)
        layers = [
            np.asarray(Image.fromarray(coarse[..., k]).resize((w, h), Image.Resampling.BICUBIC)) for k in range(c)
        ]
        grain = rng.integers(-12, 13, (h, w, c))
        images.append(np.clip(np.stack(layers, -1).astype(int) + grain, 0, 255).astype(np.uint8))
    return images


def _scaled_sizes(op, const, shape: str, config, crop) -> str:
    """The (h, w) `scaled_size` gives an image of `shape` (NHWC), as graph ops: the box input_size / crop_pct, covered
    keeping the aspect ratio (the side that fits decides), or the box itself for crop_mode squash."""
    height, width = config.image_size
    box_h, box_w = shorter_side(height, crop), shorter_side(width, crop)
    if crop.mode == "squash":
        return const([box_h, box_w])
    h, w = op("Slice", shape, const([1]), const([2])), op("Slice", shape, const([2]), const([3]))
    wide = op("GreaterOrEqual", op("Mul", w, const([box_h])), op("Mul", h, const([box_w])))  # the height decides
    new_h = op("Where", wide, const([box_h]), op("Max", const([box_h]), op("Div", op("Mul", h, const([box_w])), w)))
    new_w = op("Where", wide, op("Max", const([box_w]), op("Div", op("Mul", w, const([box_h])), h)), const([box_w]))
    return op("Concat", new_h, new_w, axis=0)
