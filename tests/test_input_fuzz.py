"""Hypothesis fuzzers for every kind of file and value a user hands vitkit: config.json, run configs (YAML files and
KEY=VALUE overrides), CSV/JSONL lists and IDX headers. Each example must end in success or a documented error
(a VitkitError: one line, exit code 2), never another exception; the file readers run under RLIMIT_AS (256 MiB
more than the process has), so an input that makes them allocate without bound fails the test."""

import gzip
import json
import shutil
import struct

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vitkit.checkpoint import load_pretrained, save_pretrained
from vitkit.data.sources import open_split
from vitkit.data.sources.idx import read_idx
from vitkit.errors import VitkitError
from vitkit.models import VisionTransformer, get_config
from vitkit.models.config import ViTConfig
from vitkit.train.config import SECTIONS, load_run_config

FUZZ = settings(
    max_examples=3 * settings.default.max_examples // 10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["abc", "", "null", "1e3", "#x", "gelu", "token", "learned"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
MODEL_KEYS = [f.name for f in __import__("dataclasses").fields(ViTConfig)]


def _documented(run):
    """run() succeeds or raises a VitkitError (exit code 2); anything else fails the test."""
    try:
        run()
    except VitkitError as err:
        assert err.exit_code == 2 and str(err).strip() and "\n" not in str(err).strip(), repr(err)


def _in_child(under_memory_limit, fn):
    kind, detail = under_memory_limit(lambda: _documented(fn))
    assert kind == "ok", detail


# -- config.json --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "ck"
    save_pretrained(
        VisionTransformer(get_config("vit_test", depth=1, image_size=8, num_classes=3)),
        path,
        extra={"class_names": ["a", "b", "c"]},
    )
    return path


@FUZZ
@given(
    model_edits=st.dictionaries(st.sampled_from(MODEL_KEYS), values, max_size=3),
    extra_edits=st.dictionaries(
        st.sampled_from(["class_names", "preprocess", "data", "source", "format", "model"]), values, max_size=2
    ),
)
def test_config_json(tmp_path_factory, under_memory_limit, checkpoint, model_edits, extra_edits):
    copy = tmp_path_factory.mktemp("c") / "ck"
    shutil.copytree(checkpoint, copy)
    config = json.loads((copy / "config.json").read_text())
    config["model"].update(model_edits)
    config.update(extra_edits)
    (copy / "config.json").write_text(json.dumps(config))
    _in_child(under_memory_limit, lambda: load_pretrained(copy))


# -- run configs --------------------------------------------------------------------------------
def _known_keys():
    import dataclasses

    keys = [f"model.{k}" for k in [*MODEL_KEYS, "name", "init"]]
    return keys + [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


KEYS = _known_keys()


@FUZZ
@given(
    overrides=st.lists(
        st.tuples(
            st.sampled_from(KEYS + ["train.nope", "x.y", "model"]),
            st.one_of(
                st.text(max_size=20),
                st.sampled_from(
                    ["nan", ".inf", "-1", "0", "1e23", "99999999999999999999", "[1, 2, 3]", "{a: [", "true"]
                ),
            ),
        ),
        max_size=4,
    )
)
def test_run_config_overrides(overrides):
    _documented(lambda: load_run_config(None, [f"{k}={v}" for k, v in overrides]))


@FUZZ
@given(
    document=st.dictionaries(
        st.sampled_from(["model", "data", "augment", "train", "other"]),
        st.one_of(values, st.dictionaries(st.sampled_from([k.split(".", 1)[1] for k in KEYS]), values, max_size=4)),
        max_size=4,
    ),
    raw=st.one_of(st.none(), st.binary(max_size=200)),
)
@example(document={"model": {"\n": None}}, raw=None)  # a key's newline once split the error over two lines
@example(document={"model": {"backbone": {"\x1b[2J": 1}}, "train": {"steps\n": 1}}, raw=None)
def test_run_config_files(tmp_path_factory, document, raw):
    path = tmp_path_factory.mktemp("y") / "run.yaml"
    path.write_bytes(raw if raw is not None else yaml.safe_dump(document).encode())
    _documented(lambda: load_run_config(path))


# -- CSV / JSONL lists --------------------------------------------------------------------------
lines = st.one_of(
    st.text(max_size=40),
    st.builds(lambda p, l: f"{p},{l}", st.text(max_size=10), st.text(max_size=10)),
    st.builds(lambda v: json.dumps(v), values),
    st.builds(lambda p, l: json.dumps({"path": p, "label": l}), values, values),
    st.sampled_from(
        ["a.png," + "x" * 200_000, "[" * 100_000, '"unclosed,1', "a.png,\x00", "a.png,--5", "a.png,1" + "0" * 5000]
    ),
)


@FUZZ
@given(suffix=st.sampled_from([".csv", ".jsonl", ".tsv"]), rows=st.lists(lines, max_size=6))
def test_image_lists(tmp_path_factory, under_memory_limit, suffix, rows):
    path = tmp_path_factory.mktemp("l") / f"list{suffix}"
    path.write_text("\n".join(rows), encoding="utf-8", errors="replace")
    _in_child(under_memory_limit, lambda: open_split(path, "train", channels=1, val_fraction=0.0, seed=0))


# -- IDX headers --------------------------------------------------------------------------------
@FUZZ
@given(
    kind=st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x07, 0xFF]),
    zero=st.binary(min_size=2, max_size=2),
    dims=st.lists(st.one_of(st.integers(0, 40), st.integers(0, 2**32 - 1)), max_size=5),
    body=st.binary(max_size=64),
    compress=st.booleans(),
    cut=st.integers(0, 30),
)
def test_idx_headers(tmp_path_factory, under_memory_limit, kind, zero, dims, body, compress, cut):
    data = (zero if cut % 3 == 0 else b"\0\0") + bytes([kind, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + body
    data = data[:-cut] if cut % 2 and cut < len(data) else data
    path = tmp_path_factory.mktemp("i") / ("x.gz" if compress else "x")
    path.write_bytes(gzip.compress(data) if compress else data)
    _in_child(under_memory_limit, lambda: read_idx(path))


def test_class_names_with_control_characters_or_twice_the_same_are_refused(tmp_path):
    """A class folder or a checkpoint's class name "b\\na\\x1b[31mg" was printed raw (a newline, a terminal colour
    code) by vitkit data and predict; ["a", "a", "b"] was accepted and predict printed "a" for two classes."""
    from PIL import Image

    import vitkit
    from vitkit.checkpoint import load_with_metadata
    from vitkit.errors import CheckpointError, DataError

    for name in ("ok", "b\na\x1b[31mg"):
        (tmp_path / "data" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "data" / name / "0.png")
    with pytest.raises(DataError, match=r"class name 'b\\na\\x1b\[31mg' holds control characters"):
        open_split(tmp_path / "data", "train", channels=3, val_fraction=0.0)
    model = vitkit.create_model("vit_test", num_classes=3)
    for names, words in ((["a", "a", "b"], "distinct"), (["a", "b\x1b[2J", "c"], "terminal escapes")):
        path = vitkit.save_pretrained(model, tmp_path / f"ckpt{len(words)}", extra={"class_names": names})
        with pytest.raises(
            CheckpointError, match="class_names must be a list of one distinct name per class .* got"
        ) as err:
            load_with_metadata(path)
        assert repr(names) in str(err.value) and words in str(err.value)
