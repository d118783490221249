"""vitkit.plots.figures: every figure is drawn and written, with the numbers behind it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import vitkit
from vitkit.evaluate import inspection
from vitkit.models import ResNetConfig, VisionTransformer, ViTConfig
from vitkit.plots import figures

PNG = b"\x89PNG\r\n\x1a\n"


def report(model: VisionTransformer, out, n: int = 4) -> list:
    torch.manual_seed(0)
    pixels = torch.rand(n, model.config.in_chans, *model.config.image_size)
    results = inspection.inspect_model(model, inspection.normalize(pixels, model.config), num_show=2, num_components=6)
    return figures.write_report(results, pixels, out, info={"hybrid": model.config.backbone is not None})


@pytest.mark.parametrize("name", ["vit_test", "vit_mini4_28"])  # RGB and grayscale
def test_all_figures_and_numbers_are_written_and_non_empty(tmp_path, name):
    torch.manual_seed(0)
    written = report(vitkit.create_model(name, depth=2), tmp_path)
    names = {p.name for p in written}
    assert names == set(figures.FIGURES.values()) | {"inspection.npz", "inspection.json"}
    for path in written:
        assert path.is_file() and path.stat().st_size > 0
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG
    with np.load(tmp_path / "inspection.npz", allow_pickle=False) as npz:
        assert npz["mean_attention_distance"].shape == (2, vitkit.get_config(name).num_heads)
        assert npz["rollout"].shape[0] == 2
    summary = json.loads((tmp_path / "inspection.json").read_text())
    assert summary["skipped"] == {} and len(summary["figures"]) == 5
    assert not list(tmp_path.glob(".*.tmp")), "no temporary files are left behind"


def test_a_hybrid_without_position_embeddings_skips_two_figures_and_says_why(tmp_path):
    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32,
        patch_size=1,
        backbone=ResNetConfig(layers=(), width=32),
        pos_embed="none",
        width=32,
        depth=2,
        mlp_dim=64,
        num_heads=2,
        num_classes=10,
    )
    report(VisionTransformer(config), tmp_path, n=2)
    summary = json.loads((tmp_path / "inspection.json").read_text())
    assert "hybrid" in summary["skipped"]["filters"] and "no position embeddings" in summary["skipped"]["pos_embed"]
    assert (
        not (tmp_path / figures.FIGURES["filters"]).exists() and not (tmp_path / figures.FIGURES["pos_embed"]).exists()
    )
    assert (tmp_path / figures.FIGURES["rollout"]).stat().st_size > 0


def test_tile_lays_maps_out_row_major_with_gaps():
    maps = np.arange(5 * 2 * 3, dtype=float).reshape(5, 2, 3)
    mosaic = figures.tile(maps, cols=2, pad=1)
    assert mosaic.shape == (3 * 3 - 1, 2 * 4 - 1)
    np.testing.assert_array_equal(mosaic[0:2, 4:7], maps[1])
    np.testing.assert_array_equal(mosaic[6:8, 0:3], maps[4])
    assert np.isnan(mosaic[2]).all() and np.isnan(mosaic[6:8, 4:7]).all()


def test_a_narrow_figure_s_title_is_wrapped_to_its_width():
    """With 2 heads the last-layer figure is 3 columns wide: its title's second line (which images, how many, how many
    trained on) was cut at both edges."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    caption = (
        "128 images from clothes/train/bag, clothes/val/trouser/0001.png; 127 of them in this model's training data"
    )
    for fig in (
        figures.last_layer_figure(torch.rand(2, 3, 16, 16), torch.rand(2, 2, 4, 4), caption),
        figures.rollout_figure(torch.rand(2, 3, 16, 16), torch.rand(2, 4, 4), None, caption),
    ):
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box = fig._suptitle.get_window_extent(canvas.get_renderer())
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)
        assert "127 of them in this model's training data" in fig._suptitle.get_text().replace("\n", " ")
