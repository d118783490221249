"""MkDocs hooks for vitkit's site (mkdocs.yml `hooks:`), run by `make docs`.

The guides in docs/ link to files outside docs/, such as ../benchmarks/RESULTS.md, because the same Markdown is also
read on the repository's web view. MkDocs only sees docs/, so those links would break the strict build. These hooks:

- mount each repository file that a page links to, outside docs/, into the site under repo/ (Markdown as a page,
  anything else, such as a figure, as a plain file), following links from mounted pages too;
- rewrite such links to the mounted copy;
- drop nav entries whose page does not exist, so the nav lists only the pages there are.

A link to a path that does not exist is left alone: MkDocs reports it, and --strict fails the build.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

log = logging.getLogger("mkdocs.hooks.vitkit")

ROOT = Path(__file__).resolve().parent.parent  # the repository
MOUNT = "repo"  # where files from outside docs/ appear in the site
# an inline link or image target: ](target) or ](target "title"); and a reference definition: [name]: target
LINK = re.compile(r"(\]\()(<[^>]*>|[^)\s]+)")
REFERENCE = re.compile(r"^( {0,3}\[[^\]]+\]:\s*)(\S+)", re.MULTILINE)
FENCE = re.compile(r"^( {0,3})(```|~~~).*?^\1\2", re.MULTILINE | re.DOTALL)


def _docs_prefix(config) -> str:
    """docs_dir relative to the repository, as a posix path ("docs")."""
    return Path(config.docs_dir).resolve().relative_to(ROOT).as_posix()


def _repo_path(src_uri: str, docs: str) -> str:
    """The repository path of a site source file."""
    if src_uri.startswith(MOUNT + "/"):
        return src_uri[len(MOUNT) + 1 :]
    return f"{docs}/{src_uri}"


def _site_uri(repo_path: str, docs: str) -> str:
    """Where a repository file lives in the site: docs/x under x, anything else under repo/."""
    if repo_path.startswith(docs + "/"):
        return repo_path[len(docs) + 1 :]
    return f"{MOUNT}/{repo_path}"


def _targets(markdown: str):
    """Every link target in `markdown`, outside fenced code blocks: (match, group index of the target)."""
    prose = FENCE.sub(lambda m: " " * len(m.group(0)), markdown)  # same offsets, no code
    for pattern in (LINK, REFERENCE):
        yield from pattern.finditer(prose)


def _relative(target: str) -> tuple[str, str] | None:
    """(path, '#anchor' or '') of a relative link, or None for an URL, an absolute path or an anchor alone."""
    target = target.strip("<>")
    if not target or target.startswith(("#", "/")) or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return None
    path, hash_, anchor = target.partition("#")
    return path, hash_ + anchor


def _outside(repo_path: str, docs: str) -> Path | None:
    """The file `repo_path` names when it is a file of the repository outside docs/, else None."""
    if repo_path.startswith("../") or repo_path == ".." or repo_path.startswith(docs + "/"):
        return None
    full = ROOT / repo_path
    return full if full.is_file() else None


def on_config(config):
    """Keep only the nav entries whose page exists (in docs/, or a repository file mounted under repo/)."""
    docs = Path(config.docs_dir)

    def exists(page: str) -> bool:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", page):
            return True  # an URL
        if page.startswith(MOUNT + "/"):
            return (ROOT / page[len(MOUNT) + 1 :]).is_file()
        return (docs / page).exists()

    def keep(items):
        kept = []
        for item in items:
            if isinstance(item, dict):
                ((title, value),) = item.items()
                if isinstance(value, list):
                    value = keep(value)
                    if value:
                        kept.append({title: value})
                elif exists(value):
                    kept.append(item)
                else:
                    log.info("nav: %s (%s) left out, no such page", title, value)
            elif exists(item):
                kept.append(item)
            else:
                log.info("nav: %s left out, no such page", item)
        return kept

    if config.nav:
        config.nav = keep(config.nav)
    return config


def on_files(files, config):
    """Mount the repository files that pages link to outside docs/, following links from mounted pages too."""
    docs = _docs_prefix(config)
    queue = list(files.documentation_pages())
    mounted: set[str] = set()
    while queue:
        page = queue.pop()
        here = posixpath.dirname(_repo_path(page.src_uri, docs))
        for m in _targets(Path(page.abs_src_path).read_text(encoding="utf-8")):
            link = _relative(m.group(2))
            if link is None or not link[0]:
                continue
            repo_path = posixpath.normpath(posixpath.join(here, link[0]))
            full = _outside(repo_path, docs)
            if full is None or repo_path in mounted:
                continue
            mounted.add(repo_path)
            uri = _site_uri(repo_path, docs)
            if files.get_file_from_path(uri) is not None:
                continue
            file = File.generated(config, uri, abs_src_path=str(full), inclusion=InclusionLevel.NOT_IN_NAV)
            files.append(file)
            if file.is_documentation_page():
                queue.append(file)
    if mounted:
        log.info("mounted from outside %s/ under %s/: %s", docs, MOUNT, ", ".join(sorted(mounted)))
    return files


def on_page_markdown(markdown, page, config, files):
    """Point the links to files outside docs/ at their mounted copies, relative to this page."""
    docs = _docs_prefix(config)
    here_repo = posixpath.dirname(_repo_path(page.file.src_uri, docs))
    here_site = posixpath.dirname(page.file.src_uri)
    prose = FENCE.sub(lambda m: " " * len(m.group(0)), markdown)
    edits = []
    for m in _targets(prose):
        link = _relative(m.group(2))
        if link is None or not link[0]:
            continue
        repo_path = posixpath.normpath(posixpath.join(here_repo, link[0]))
        if repo_path.startswith("../") or repo_path == "..":
            continue  # outside the repository: left for MkDocs to report
        uri = _site_uri(repo_path, docs)
        if files.get_file_from_path(uri) is None:
            continue  # a broken link: left for MkDocs to report
        new = posixpath.relpath(uri, here_site or ".") + link[1]
        if new != m.group(2).strip("<>"):
            edits.append((m.start(2), m.end(2), new))
    for start, end, new in reversed(edits):
        markdown = markdown[:start] + new + markdown[end:]
    return markdown
