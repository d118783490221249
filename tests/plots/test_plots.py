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
    monkeypatch.setattr(
        plots, "_save", lambda fig, path: titles.setdefault(path.name, fig.axes[0].get_title()) and save(fig, path)
    )
    rows = [
        {"kind": "train", "step": 1, "loss": 2.0, "lr": 0.1},
        {"kind": "val", "step": 1, "val_top1": 0.5, "val_top5": 0.9, "val_loss": 1.0},
    ]
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
    monkeypatch.setattr(
        plots,
        "_save",
        lambda fig, path: (
            labels.setdefault(path.name, [line.get_label() for line in fig.axes[0].lines]) and save(fig, path)
        ),
    )
    rows = [
        {"kind": "val", "step": 1, "val_top1": 0.5, "val_top5": 1.0, "val_loss": 1.0},
        {"kind": "train", "step": 1, "loss": 2.0, "lr": 0.1},
    ]
    plot_run(rows, tmp_path / "three", classes=3)
    assert labels.pop("accuracy.png") == ["validation top-1"]
    plot_run(rows, tmp_path / "ten", classes=10)
    assert labels["accuracy.png"] == ["validation top-1", "validation top-5"]


def test_the_figures_say_what_was_measured(tmp_path, monkeypatch):
    """A masked-patch run's accuracy.png said "validation top-1" (it is the colour prediction's), an EMA run's did not say
    the EMA weights were scored, and every loss.png said "smoothed / mixed targets" with neither in the recipe."""
    import vitkit.plots as plots

    labels = {}
    save = plots._save
    monkeypatch.setattr(
        plots,
        "_save",
        lambda fig, path: (
            labels.setdefault(f"{path.parent.name}/{path.name}", [line.get_label() for line in fig.axes[0].lines])
            and save(fig, path)
        ),
    )
    rows = [
        {"kind": "val", "step": 1, "val_top1": 0.5, "val_top5": 0.9, "val_loss": 1.0},
        {"kind": "train", "step": 1, "loss": 2.0, "lr": 0.1},
    ]
    plot_run(rows, tmp_path / "mpp", classes=3, objective="masked_patch", ema=True, soft_targets=False)
    assert labels["mpp/accuracy.png"] == [
        "validation colour-prediction top-1 (EMA weights)",
        "validation colour-prediction top-5 (EMA weights)",
    ]
    assert labels["mpp/loss.png"] == ["train loss", "validation colour-prediction loss (EMA weights)"]
    plot_run(rows, tmp_path / "plain", classes=10, soft_targets=True)
    assert (
        labels["plain/accuracy.png"][0] == "validation top-1"
        and labels["plain/loss.png"][0] == "train loss (smoothed / mixed targets)"
    )


def test_the_summarys_img_s_is_images_over_time_not_a_mean_of_window_rates():
    from vitkit.train.plan import mean_rate as _mean_rate

    rows = [
        {"kind": "train", "step": 10, "img_s": 100.0},
        {"kind": "train", "step": 11, "img_s": 1000.0},
    ]  # a short fast last window
    assert _mean_rate(rows, 10) == 110 / (100 / 100 + 10 / 1000)  # 108.9 img/s, where the mean of the rates said 550
