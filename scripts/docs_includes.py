"""The documentation's examples, rendered into the pages from the files they show.

A page (README.md, docs/*.md) holds blocks like::

    <!-- include: models/upsert/orders.sql -->
    ```sql
    ...the text of models/upsert/orders.sql...
    ```
    <!-- end include -->

or, for a part of a file, ``<!-- include: profiles.yml:local -->``: the lines between
the file's marker lines ``--8<-- [start:local]`` and ``--8<-- [end:local]`` (comments in
the file's own syntax, left out of the block). The fence's language follows the file's
extension. Nothing between the two comment lines is written by hand, so a page reads
the same on GitHub, in a terminal and on the site; the docs test checks that every
block equals what this script renders from its file, so an example cannot go stale
without the test failing. A new example is the two comment lines with nothing between
them: the script fills them in.

Usage:
  .venv/bin/python scripts/docs_includes.py [PAGE ...]
      renders every include block of the pages (all of them if none is named) again
  .venv/bin/python scripts/docs_includes.py --check [PAGE ...]
      writes nothing; fails, naming the page and the include, where a block differs
      from its file
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
# a block names a file of the repository, relative to its root, and may name a section
BLOCK = re.compile(
    r"^(<!-- include: (?P<name>[\w./-]+(?::[\w-]+)?) -->\n)(?P<body>.*?)(^<!-- end include -->$)",
    re.S | re.M,
)
OPENING = re.compile(r"^<!-- include: .*-->$", re.M)
LANGUAGES = {".sql": "sql", ".py": "python", ".yml": "yaml", ".yaml": "yaml"}
# pymdownx.snippets' include line, which the pages no longer use (nothing expands it)
SNIPPET = re.compile(r'^\s*--8<--\s+"[^"]+"\s*$', re.M)


class IncludeError(Exception):
    """An include that names no file, no section of it, or a file no fence can hold."""


def section(text: str, name: str, file: str) -> str:
    """The lines between the marker lines of section ``name``, the markers left out."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if f"--8<-- [start:{name}]" in line]
    ends = [i for i, line in enumerate(lines) if f"--8<-- [end:{name}]" in line]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise IncludeError(
            f"{file} must mark the section {name} once, with a line `--8<-- [start:{name}]` "
            f"before a line `--8<-- [end:{name}]`"
        )
    return "\n".join(lines[starts[0] + 1 : ends[0]])


def render(name: str) -> str:
    """The fenced block of an include: ``path`` or ``path:section``."""
    file, _, part = name.partition(":")
    path = ROOT / file
    if not path.is_file():
        raise IncludeError(f"{file} is not a file of the repository")
    if path.suffix not in LANGUAGES:
        raise IncludeError(f"{file}: no fence language for {path.suffix or 'no extension'}")
    text = path.read_text()
    text = section(text, part, file) if part else text
    if re.search(r"^\s*```", text, flags=re.M):
        raise IncludeError(f"{name} has a line of ``` that would close the fence")
    return f"```{LANGUAGES[path.suffix]}\n{text.rstrip()}\n```\n"


def blocks(text: str) -> list[tuple[str, str]]:
    """(include, body) of each include block of a page."""
    found = [(m.group("name"), m.group("body")) for m in BLOCK.finditer(text)]
    if len(OPENING.findall(text)) != len(found):
        raise IncludeError(
            "an include line that names no file like this, or has no `<!-- end include -->`"
        )
    return found


def render_page(text: str) -> str:
    """The page with every include block rendered again from its file."""
    blocks(text)
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def shown(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def problems(page: Path) -> list[str]:
    """What is stale or broken in a page's includes, one line each (none: in sync)."""
    text, found = page.read_text(), []
    try:
        for name, body in blocks(text):
            if body != render(name):
                found.append(
                    f"{shown(page)}: {name} differs from its file: "
                    "run .venv/bin/python scripts/docs_includes.py"
                )
    except IncludeError as exc:
        found.append(f"{shown(page)}: {exc}")
    for line in SNIPPET.findall(text):
        found.append(
            f"{shown(page)}: {line.strip()} is a snippets include, which nothing expands: "
            "write an include block instead"
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="pages (default: all of them)")
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    pages = [page.resolve() for page in args.pages] or list(PAGES)
    if args.check:
        found = [line for page in pages for line in problems(page)]
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    for page in pages:
        text = page.read_text()
        try:
            rendered = render_page(text)
        except IncludeError as exc:
            print(f"{shown(page)}: {exc}", file=sys.stderr)
            return 1
        if rendered != text:
            page.write_text(rendered)
            print(f"rendered {shown(page)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
