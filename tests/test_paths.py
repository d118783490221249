"""Paths users type that vitkit cannot read: URLs are refused in one line that says why; ORG/NAME that is no path gets
the hub name's spelling."""

import pytest

from vitkit.checkpoint import load_pretrained, read_metadata
from vitkit.cli import main
from vitkit.data.spec import absolute
from vitkit.errors import CheckpointError, DataError


@pytest.mark.parametrize(
    "url", ["https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz", "hf://google/vit-base-patch16-224"]
)
def test_a_url_is_named_as_given_and_refused_as_a_download(url):
    for read in (load_pretrained, read_metadata):
        with pytest.raises(CheckpointError, match=f"^{url}: a URL; vitkit reads local files, never URLs"):
            read(url)  # as typed: Path would have folded 'https://' into 'https:/'
    with pytest.raises(DataError, match="a URL"):
        absolute(url)  # data.path, --data


def test_a_model_hub_name_gets_the_hub_spelling_a_local_path_does_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        CheckpointError,
        match="google/vit-base-patch16-224: no such file or directory; .* write hf-hub:google/vit-base-patch16-224$",
    ):
        load_pretrained("google/vit-base-patch16-224")
    (tmp_path / "runs").mkdir()
    for local in ("runs/missing", "./x/y", str(tmp_path / "x" / "y")):
        with pytest.raises(CheckpointError, match="no such file or directory$"):
            load_pretrained(local)


def test_predict_refuses_a_url_image_in_one_line(tmp_path, capsys):
    import vitkit

    model = vitkit.create_model("vit_test")
    model.head.bias.data[0] = 1.0  # a new all-zero head is refused as never trained
    ckpt = vitkit.save_pretrained(model, tmp_path / "ckpt")
    assert main(["predict", str(ckpt), "https://example.com/cat.jpg"]) == 2
    assert capsys.readouterr().err.strip() == (
        "vitkit predict: error: https://example.com/cat.jpg: a URL; vitkit reads local files, never URLs: save the "
        "file and pass its path (a model on the Hugging Face hub: hf-hub:ORG/NAME)"
    )
