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


def test_top5_is_left_out_of_the_accuracy_figure_for_five_classes_or_fewer(tmp_path, monkeypatch):
    """accuracy.png drew a top-5 line at 1.0 for a 3-class run, where top-5 says nothing (eval leaves it out too)."""
    import vitkit.plots as plots

    labels = {}
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: labels.setdefault(path.name, [line.get_label() for line in fig.axes[0].lines])
                        and save(fig, path))
    rows = [{"kind": "val", "step": 1, "val_top1": 0.5, "val_top5": 1.0, "val_loss": 1.0}, {"kind": "train", "step": 1, "loss": 2.0, "lr": 0.1}]
    plot_run(rows, tmp_path / "three", classes=3)
    assert labels.pop("accuracy.png") == ["validation top-1"]
    plot_run(rows, tmp_path / "ten", classes=10)
    assert labels["accuracy.png"] == ["validation top-1", "validation top-5"]
