"""Write docs/reference/cli.md, the command-line reference, from vitkit's own argparse parsers (`vitkit.cli.build_parser`):
every command with its arguments, their defaults and help, and its examples. tests/test_docs.py checks that the page is
what this script writes, so a flag changed without running it fails the suite.

    PYTHONPATH=src python scripts/cli_reference.py     # rewrite the page
"""

from __future__ import annotations

import argparse
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md"
HEAD = """# Command line

Generated from the parsers by `python scripts/cli_reference.py`; `vitkit COMMAND --help` prints the same.
Run configs take dotted `KEY=VALUE` overrides after the flags (see [Train on your images](../training.md)).
"""


def render() -> str:
    """The whole page, from the parsers as they are."""
    from vitkit.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    summary = {choice.dest: choice.help for choice in sub._choices_actions}
    lines = [HEAD, "| command | what it does |", "| --- | --- |"]
    lines += [f"| [`vitkit {name}`](#vitkit-{name}) | {_cell(summary[name])} |" for name in sub.choices]
    for name, parser in sub.choices.items():
        lines += ["", *_command(name, parser)]
    return "\n".join(lines) + "\n"


def _command(name: str, parser: argparse.ArgumentParser) -> list[str]:
    """One command's section: its description, a table of its arguments, its epilog (examples and fine print)."""
    lines = [f"## vitkit {name}", ""]
    if parser.description:
        lines += [*_text(parser.description), ""]
    lines += ["| argument | default | meaning |", "| --- | --- | --- |"]
    for action in parser._actions:
        if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
            lines.append(f"| `{_spelling(action)}` | {_default(action)} | {_cell(action.help or '')} |")
    if parser.epilog:
        lines += ["", *_text(parser.epilog)]
    return lines


def _text(text: str) -> list[str]:
    """A description or epilog: one line as a paragraph, laid-out text (examples, lists) as it is, in a code block."""
    text = text.strip("\n")
    if "\n" not in text:
        return [_escape(text)]
    return ["```text", text, "```"]


def _spelling(action: argparse.Action) -> str:
    """How the argument is typed: `--image-size H [W]`, `--json`, `KEY=VALUE ...`."""
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    if action.nargs == 0:
        shape = ""
    elif action.nargs == "?":
        shape = f"[{metavar}]"
    elif action.nargs == "*":
        shape = f"[{metavar} ...]"
    elif action.nargs == "+":
        shape = f"{metavar} [{metavar} ...]"
    elif isinstance(action.nargs, int):
        shape = " ".join([metavar] * action.nargs)
    else:
        shape = metavar
    return " ".join(part for part in (", ".join(action.option_strings), shape) if part)


def _default(action: argparse.Action) -> str:
    value = action.default
    if value in (None, False, "", [], argparse.SUPPRESS) or action.nargs == 0:
        return ""
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return f"`{value}`"


def _cell(text: str) -> str:
    """One line of help in a table cell (argparse's %% is a %)."""
    return _escape(" ".join(text.replace("%%", "%").split())).replace("|", "\\|")


def _escape(text: str) -> str:
    """Plain text in Markdown: no emphasis, no HTML."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
