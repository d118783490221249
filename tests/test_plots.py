from PIL import Image

from vitkit.plots import plot_confusion, plot_run


def test_plots_are_pngs(tmp_path):
    rows = [{"kind": "train", "step": s, "loss": 2.0 / s, "lr": 0.1 * s} for s in range(1, 6)]
    rows.append({"kind": "val", "step": 5, "val_top1": 0.5, "val_top5": 0.9, "val_loss": 1.0})
    written = plot_run(rows, tmp_path)
    assert sorted(p.name for p in written) == ["accuracy.png", "loss.png", "lr.png"]
    written.append(plot_confusion([[3, 1], [0, 4]], ["a", "b"], tmp_path / "cm.png"))
    for path in written:
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 100
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_every_figure_from_images_names_them_under_its_title(tmp_path, monkeypatch):
    import vitkit.plots as plots

    titles = {}
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: titles.setdefault(path.name, fig.axes[0].get_title()) and save(fig, path))
    rows = [{"kind": "train", "step": 1, "loss": 2.0, "lr": 0.1}, {"kind": "val", "step": 1, "val_top1": 0.5, "val_top5": 0.9, "val_loss": 1.0}]
    plot_run(rows, tmp_path, train_data="120 images, /data/train", val_data="36 images, /data/val")
    plot_confusion([[3, 1], [0, 4]], ["a", "b"], tmp_path / "cm.png", data="val of /data: 8 images")
    assert titles["loss.png"] == "Loss\ntrain: 120 images, /data/train\nvalidation: 36 images, /data/val"
    assert titles["accuracy.png"] == "Accuracy\nvalidation: 36 images, /data/val"
    assert titles["cm.png"] == "Confusion matrix\nval of /data: 8 images"
