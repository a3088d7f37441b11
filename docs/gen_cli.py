"""Writes the CLI reference (``reference/cli.md``) from the argparse parser, at build time.

Run by mkdocs-gen-files (mkdocs.yml).  ``meshnb.cli.build_parser()`` loads no numba, so this is quick.
"""

from __future__ import annotations

import argparse
import re

import mkdocs_gen_files

from meshnb.cli import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, help, parser)`` of each sub-command of ``parser``, in the order they were added."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _usage(parser: argparse.ArgumentParser) -> str:
    """argparse's usage without its ``usage: `` prefix (and the indent it gives the wrapped lines)."""
    lines = parser.format_usage().strip().splitlines()
    return "\n".join([lines[0].removeprefix("usage: ")] + [line[len("usage: ") :] for line in lines[1:]])


def _markdown_text(text: str) -> str:
    """Help text as Markdown shows it literally, as ``-h`` does: ``{"violations": [...]}`` was read as
    an attribute list and ``_x_`` as emphasis, so Markdown's punctuation is escaped, ``<`` and ``&`` too."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace("\n", " ")
    return re.sub(r"([\\`*_{}\[\]()#+!|>-])", r"\\\1", text)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """One Markdown table row per argument of ``parser`` (positionals first, as argparse lists them)."""
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(action.option_strings) or action.metavar or action.dest
        if action.option_strings and action.nargs != 0:
            names += f" {action.metavar or action.dest.upper()}"
        text = _markdown_text(parser._get_formatter()._expand_help(action) if action.help else "")
        rows.append(f"| `{names}` | {text} |")
    return rows


def _write(out: object, path: str, parser: argparse.ArgumentParser, level: int) -> None:
    for name, help_text, sub in _subcommands(parser):
        command = f"{path} {name}"
        print(f"\n{'#' * level} `{command}`\n\n{help_text}\n", file=out)
        print(f"```\n{_usage(sub)}\n```\n", file=out)
        rows = _options(sub)
        if rows:
            print("| argument | meaning |\n| --- | --- |", file=out)
            print("\n".join(rows), file=out)
        _write(out, command, sub, level + 1)


with mkdocs_gen_files.open("reference/cli.md", "w") as out:
    parser = build_parser()
    print("# Command line\n", file=out)
    print(
        "Generated from the argparse parser (`meshnb.cli.build_parser()`) when the site is built, so it lists "
        "every command and option as the program has them. `python -m meshnb ...` is the same as `meshnb ...`; "
        "bare `meshnb` lists the commands. Exit codes and what the options do at length: the guides.\n",
        file=out,
    )
    print(f"```\n{_usage(parser)}\n```", file=out)
    _write(out, "meshnb", parser, 2)
