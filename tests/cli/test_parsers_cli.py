"""Parsers bound by what a valid input can need, seen through `vitkit data`: a damaged tar header, a label that only
looks like a number, a class index no dataset has, a brace pattern naming billions of shards. Each is one line and
exit 2, in bounded time and memory."""

import io
import resource
import tarfile

import pytest
from PIL import Image


def _jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(buffer, "JPEG")
    return buffer.getvalue()


def _tar(path, members):
    """A tar of (name, data, type) members, written as given (a pax header is a member of type x)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.size, info.type = len(data), kind
            tar.addfile(info, io.BytesIO(data))


def _limited(mb: int):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))

    return limit


def _one_line(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize(
    "record, words",
    [
        (b"0 path=a\n", "pax record"),  # a record of length 0: the reader never moved on
        (b"zz path=a\n", "pax record"),  # a length that is no number: a traceback
        (b"13 \xff\xfe=value\n", "pax record"),  # a key that is no UTF-8: a traceback
        (b"13 size=abcd\n", "size"),  # a size that is no number: a traceback
        (b"99 path=a\n", "pax record"),  # a record longer than its header
    ],
)
def test_a_damaged_pax_header_is_one_line_in_bounded_time(tmp_path, run_cli, record, words):
    shard = tmp_path / "s" / "shard-000000.tar"
    _tar(
        shard, [("pax", record, tarfile.XHDTYPE), ("a.jpg", _jpeg(), tarfile.REGTYPE), ("a.cls", b"0", tarfile.REGTYPE)]
    )
    _one_line(run_cli("data", shard.parent, timeout=60), "shard-000000.tar", words)


@pytest.mark.parametrize(
    "label, words",
    [
        ("²", "mix class indices"),  # passes str.isdigit(), int() refuses it: a traceback
        ("٣", "mix class indices"),  # Arabic-Indic three: silently class index 3
    ],
)
def test_a_label_that_only_looks_like_a_number_is_a_name(tmp_path, vitkit_cmd, label, words):
    shard = tmp_path / "s" / "shard-000000.tar"
    members = [("a.jpg", _jpeg(), tarfile.REGTYPE), ("a.cls", label.encode(), tarfile.REGTYPE)]
    members += [(f"b{i}.jpg", _jpeg(), tarfile.REGTYPE) for i in range(4)]
    members += [(f"b{i}.cls", b"3", tarfile.REGTYPE) for i in range(4)]
    _tar(shard, members)
    _one_line(vitkit_cmd("data", shard.parent), words)


def _parquet(path, labels):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [{"bytes": _jpeg(), "path": None} for _ in labels]
    pq.write_table(pa.table({"image": images, "label": labels}), path)


@pytest.mark.parametrize(
    "labels, words",
    [
        ([0, 2_000_000_000], "class index 2000000000 is over the limit"),  # two billion class names were built
        (["0", "²"], "mix class indices"),  # int() refused it: a traceback
    ],
)
def test_a_parquet_label_no_dataset_can_have_is_one_line_in_bounded_memory(tmp_path, run_cli, labels, words):
    pytest.importorskip("pyarrow")
    _parquet(tmp_path / "p" / "train-00000.parquet", labels)
    result = run_cli("data", tmp_path / "p", timeout=120, preexec_fn=_limited(3072))
    _one_line(result, "train-00000.parquet", words)


@pytest.mark.parametrize(
    "pattern, words",
    [
        ("train-{0..99999999999}.tar", "names more than"),
        ("train-" + "{a,b}" * 30 + ".tar", "names more than"),
        ("train-" + "{a," * 30 + "b" + "}" * 30 + ".tar", "names more than"),  # nested: each level doubles
        ("train-{0.." + "9" * 5000 + "}.tar", "names more than"),  # int() refused so many digits: a traceback
    ],
)
def test_a_brace_pattern_naming_billions_of_shards_is_one_line_in_bounded_memory(tmp_path, run_cli, pattern, words):
    result = run_cli("data", tmp_path / pattern, timeout=120, preexec_fn=_limited(3072))
    _one_line(result, words)
