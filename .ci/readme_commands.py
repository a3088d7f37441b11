"""The README's two commands, as printed: `python3 .ci/readme_commands.py N` prints command N (1: the
main job, 2: the tests) from the first ``sh`` block of README.md's set-up section, so that CI runs
what a new user copies and the two cannot drift (tests/test_ci.py parses them the same way).
Standard library only: CI runs it before any venv exists."""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Set-up and the two commands"


def commands(text: str) -> list[str]:
    """The command lines (not the comments) of the first ``sh`` block after the set-up heading."""
    if SECTION not in text:
        raise ValueError(f"README.md has no section {SECTION!r}")
    block = re.search(r"^```sh\n(.*?)^```", text.split(SECTION, 1)[1], re.MULTILINE | re.DOTALL)
    if block is None:
        raise ValueError(f"README.md's {SECTION!r} has no sh block")
    lines = [line.strip() for line in block.group(1).splitlines()]
    found = [line for line in lines if line and not line.startswith("#")]
    if len(found) != 2:
        raise ValueError(f"README.md's set-up block has {len(found)} commands, not 2: {found}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("1", "2"):
        print("usage: readme_commands.py 1|2", file=sys.stderr)
        return 2
    try:
        print(commands(README.read_text(encoding="utf-8"))[int(argv[0]) - 1])
    except ValueError as e:
        print(f"readme_commands.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
