"""Fuzzing the tar header reader against Python's tarfile, and the brace expander against a simple reference, with
hypothesis: every outcome is a DataError or the right answer, in bounded time and memory."""

import io
import re
import tarfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vitkit.data.sources.shards import MAX_SHARD_NAMES, expand_braces
from vitkit.data.sources.tar import _index_tar, _tar_files, _tarfile_members
from vitkit.errors import DataError

NAMES = st.text(st.sampled_from("abé/._-x0"), min_size=1, max_size=130)


# every type flag a tar writer sets: files (regular, V7, contiguous), links, devices, directories, FIFOs
TYPES = [tarfile.REGTYPE, tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE]
TYPES += [tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE]
# bytes written over a header: numbers, pax records, and type flags (with data, without, extension headers, unknown)
CHUNKS = [b"0 ", b"-1000", b"0 x=y\n", b"\xff\xfe", b"abcd", b"size=9", b"x", b"g", b"X", b"L", b"K", b"1", b"5", b"Z"]


def _link_with_a_size() -> bytes:
    """The archive a random search found (make test failed on it): a hard link named ././@PaxHeader whose size
    field says 12, the 12 bytes `12 comment=\\n` after it, then four regular files. A link carries no data (tarfile
    and POSIX): the block after it is the next header, here a damaged one that ends the archive with no file."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        link = tarfile.TarInfo("././@PaxHeader")
        link.type = tarfile.LNKTYPE
        tar.addfile(link)
        for _ in range(4):
            tar.addfile(tarfile.TarInfo("0"), io.BytesIO(b""))
    data = bytearray(buffer.getvalue())
    data[124:136] = b"%011o\0" % 12
    _fix_checksum(data, 0)
    return bytes(data[:512]) + b"12 comment=\n".ljust(512, b"\0") + bytes(data[512:])


def _v7_directory_with_a_size() -> bytes:
    """The archive a long search found: a member named `/` with type flag NUL (a V7 directory, by its trailing slash)
    whose size field says 1, then a file. A directory carries no data: the block after it is the next header."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in ("/", "0"):
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    data = bytearray(buffer.getvalue())
    data[124:136], data[156:157] = b"%011o\0" % 1, b"\0"
    _fix_checksum(data, 0)
    return bytes(data[:512]) + bytes(512) + bytes(data[512:])


def _fix_checksum(data: bytearray, block: int) -> None:
    data[block + 148 : block + 156] = b" " * 8
    data[block + 148 : block + 155] = b"%06o\0" % sum(data[block : block + 512])


@st.composite
def archives(draw) -> bytes:
    """A tar tarfile writes (ustar, GNU or pax; long names and link targets, every member type, pax records), then
    perhaps damaged: header bytes overwritten (the checksum made right again, or not), pax records rewritten, type
    flags changed, or the file cut."""
    fmt = draw(st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name in draw(st.lists(NAMES, min_size=1, max_size=4)):
            info = tarfile.TarInfo(name if fmt != tarfile.USTAR_FORMAT else name[:99])
            info.type = draw(st.sampled_from(TYPES))
            if info.type in (tarfile.LNKTYPE, tarfile.SYMTYPE):
                info.linkname = draw(NAMES) if fmt != tarfile.USTAR_FORMAT else "t"
            payload = draw(st.binary(max_size=700)) if info.isreg() else b""
            info.size = len(payload)
            if fmt == tarfile.PAX_FORMAT and draw(st.booleans()):
                info.pax_headers = {"comment": draw(st.text(max_size=20))}
            tar.addfile(info, io.BytesIO(payload))
    data = bytearray(buffer.getvalue())
    for _ in range(draw(st.integers(0, 3))):
        block = draw(st.integers(0, len(data) // 512 - 1)) * 512
        at = block + draw(st.sampled_from([0, 124, 136, 148, 156, 257, 512, 520, 600]))
        chunk = draw(st.one_of(st.sampled_from(CHUNKS), st.binary(min_size=1, max_size=12)))
        data[at : at + len(chunk)] = chunk[: max(len(data) - at, 0)]
        if draw(st.booleans()):  # a header that passes its checksum, so that its fields are read
            _fix_checksum(data, block)
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@settings(
    max_examples=4 * settings.default.max_examples,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=archives())
@example(data=_link_with_a_size())
@example(data=_v7_directory_with_a_size())
def test_the_tar_header_reader_finds_what_tarfile_finds_or_says_the_shard_is_damaged(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("tar") / "s.tar"
    path.write_bytes(data)
    try:
        _index_tar(path)
    except DataError:
        return
    with open(path, "rb") as f:
        found = [m[:3] for m in _tar_files(f, path)]
    try:
        expected = [m[:3] for m in _tarfile_members(path)]
    except tarfile.ReadError:
        return  # tarfile fails where vitkit's reader stopped at a damage that ends the archive for both
    assert found == expected


def test_the_tar_fuzzer_runs_in_bounded_memory(under_memory_limit, tmp_path_factory):
    """The same property in a child whose memory is bounded: a header that promises gigabytes reads none of them."""
    status, detail = under_memory_limit(
        lambda: test_the_tar_header_reader_finds_what_tarfile_finds_or_says_the_shard_is_damaged(tmp_path_factory),
        mb=512,
    )
    assert status == "ok", detail


def _reference(pattern: str) -> list[str]:
    """The expansion, made the plain way (all at once): right, where the pattern is small."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail, body = pattern[: match.start()], pattern[match.end() :], match.group(1)
    numbers = re.fullmatch(r"(\d+)\.\.(\d+)", body, flags=re.ASCII)
    if numbers:
        first, last = numbers.groups()
        width = len(first) if first.startswith("0") else 0
        options = [str(i).zfill(width) for i in range(int(first), int(last) + 1)]
    else:
        options = body.split(",")
    return [name for option in options for name in _reference(head + option + tail)]


PIECES = st.sampled_from(["{", "}", ",", "a", "b", "..", "0", "7", "09", "12", "{0..3}", "{a,b}", "{x,{y,z}}", "-"])


@settings(max_examples=5 * settings.default.max_examples, deadline=2000)
@given(pieces=st.lists(PIECES, max_size=10))
def test_small_brace_patterns_expand_as_the_reference_does(pieces):
    pattern = "".join(pieces)
    expected = _reference(pattern) if sum(p.count("{") for p in pieces) <= 4 else None
    try:
        names = expand_braces(pattern)
    except DataError:
        assert expected is None or len(expected) > MAX_SHARD_NAMES
        return
    assert len(names) <= MAX_SHARD_NAMES and (expected is None or names == expected)


@settings(max_examples=settings.default.max_examples, deadline=5000)
@given(
    groups=st.lists(st.sampled_from(["{a,b}", "{0..999}", "{0..99999999999}", "{a,{b,c}}", "{,}", "x"]), max_size=30)
)
def test_any_brace_pattern_makes_at_most_the_bound_or_one_error(groups):
    try:
        names = expand_braces("s-" + "".join(groups) + ".tar")
    except DataError as err:
        assert "names more than" in str(err)
        return
    assert len(names) <= MAX_SHARD_NAMES
