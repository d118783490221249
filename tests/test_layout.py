"""The package's shape, as CONTRIBUTING.md's room table states it: imports point down, no cycles, short functions.

The rules are read from that table, so the document and the tree cannot drift apart: a new room must be added there
(with its layer) before its first import is allowed.
"""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "vitkit"
MAX_LINES, MAX_CLI_LINES = 60, 40


def room_layers() -> dict[str, int]:
    """{room: layer} from the table under CONTRIBUTING.md's "Rooms" heading (rows `| layer | `room`, ... | ...`)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## Rooms", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for row in re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, flags=re.M):
        for room in re.findall(r"`([\w.]+)/?`", row[1]):
            layers[room.removesuffix(".py")] = int(row[0])
    return layers


def modules() -> dict[str, Path]:
    """{dotted module name: file} of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path) -> set[str]:
    """The vitkit modules `name` imports, at the top or inside functions, resolved to modules of the package."""
    known = modules()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        found |= {t for t in targets if t.split(".")[0] == "vitkit" and t != name}
    return found


def room(module: str) -> str:
    """The room a module lives in: its first part below vitkit (`vitkit.train.loop` -> `train`); the root is `vitkit`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "vitkit"


def test_every_room_is_in_the_table_and_every_import_points_down():
    layers = room_layers()
    assert {"models", "checkpoint", "data", "inference", "evaluate", "train", "cli", "files"} <= set(layers)
    unlisted = sorted({room(m) for m in modules()} - set(layers) - {"vitkit"})
    assert not unlisted, f"rooms missing from CONTRIBUTING.md's room table: {unlisted}"
    wrong = []
    for name, path in modules().items():
        here = room(name)
        for target in imports(name, path):
            there = room(target)
            if there == here or here == "vitkit":
                continue
            # the package root (`import vitkit`) reaches the public API lazily: the checkpoint formats and inference
            if there == "vitkit" and layers[here] >= layers["inference"]:
                continue
            same_base = layers.get(there) == layers[here] == 0
            if there == "vitkit" or not (layers[there] < layers[here] or same_base):
                wrong.append(
                    f"{name} ({here}, layer {layers[here]}) imports {target} ({there}, layer {layers.get(there)})"
                )
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    # a package's __init__ importing its own submodules (re-exports) is no cycle of concerns: leave those edges out
    graph = {
        name: {t for t in imports(name, path) if not (path.name == "__init__.py" and t.startswith(name + "."))}
        for name, path in modules().items()
    }
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_are_short(path):
    limit = MAX_CLI_LINES if path.parent.name == "cli" else MAX_LINES
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit
    ]
    assert not long, f"over {limit} lines: {long}"


def _wrapped_for_a_comment(source: str, limit: int = 120) -> list[int]:
    """First lines of statements that span lines only for an end-of-line comment: without the comment they fit on one
    line of `limit` (no multi-line string, no list with a trailing comma, no own-line comment inside)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines, found, statement = source.splitlines(), [], []
    for token in tokens:
        statement.append(token)
        if token.type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
            continue
        code = [t for t in statement if t.type not in SPACING and t.type != tokenize.COMMENT]
        comments = [t for t in statement if t.type == tokenize.COMMENT]
        statement = []
        if not code or not comments or code[0].start[0] == code[-1].end[0]:
            continue
        first, last = code[0].start[0], code[-1].end[0]
        rows = {r for t in code for r in range(t.start[0], t.end[0] + 1)}
        if any(c.start[0] not in rows or c.start[0] > last for c in comments):
            continue
        if any(t.type == tokenize.STRING and t.start[0] != t.end[0] for t in code):
            continue
        texts = [lines[r - 1][: next((c.start[1] for c in comments if c.start[0] == r), None)].strip() for r in
                 range(first, last + 1)]  # fmt: skip
        if any(t.endswith(",") for t in texts[:-1]):
            continue
        joined = " ".join(t for t in texts if t)
        for opened, closed in (("( ", "("), ("[ ", "["), ("{ ", "{"), (" )", ")"), (" ]", "]"), (" }", "}")):
            joined = joined.replace(opened, closed)
        if len(lines[first - 1]) - len(lines[first - 1].lstrip()) + len(joined) <= limit:
            found.append(first)
    return found


SPACING = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_comments_stand_on_their_own_line(path):
    """A comment at the end of a line made the formatter wrap its statement (`x = (\\n    value  # why\\n)`,
    `if (\\n    cond\\n):  # why`): it stands on its own line above the statement instead."""
    wrapped = _wrapped_for_a_comment(path.read_text(encoding="utf-8"))
    assert not wrapped, f"{path.relative_to(ROOT)}: lines {wrapped}: put the comment on its own line above"


def test_the_wrapped_comment_finder_finds_one():
    assert _wrapped_for_a_comment("x = (\n    4096.0  # why\n)\nif (\n    x\n):  # why\n    pass\n") == [1, 4]
    assert _wrapped_for_a_comment("# why\nx = 4096.0\nitems = [\n    1,  # one\n    2,\n]\n") == []
