"""One meaning per value, everywhere: one table of (value, entry point) -> answer.

Each row is a value as a caller writes it, to the library (``meshnb.train``'s ``set_lr``,
``meshnb.sweep``'s ``lrs``, ...) and as text to the command lines (``meshnb train --set-lr``,
``meshnb sweep --lr``, ``meshnb check``'s flags), and the one answer every entry point gives:

- :class:`Runs` the LR whose f32 word is ``word``: the digest is the independent reference's
  (:mod:`meshnb.testing.reference`) of that word, so a value read with another meaning fails;
- :class:`Warns`: runs that word and warns once (a ``FutureWarning``; on a command line one
  ``meshnb: warning:`` line) with the fragment;
- :class:`Refuses`: the exception type (on a command line exit 2, one line on stderr, no traceback)
  with the fragment, and the argument named as the caller wrote it.

Driven as numbagg's one table: the rows are data, one test per (row, entry point).  The choices the
table makes are written down in docs/api/runspec.md ("One meaning per value").
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import meshnb
from meshnb.cli import main
from meshnb.runspec import OptionError
from meshnb.testing import reference as ref

STEPS = 8


@dataclass(frozen=True)
class Runs:
    word: int


@dataclass(frozen=True)
class Warns:
    word: int
    fragment: str


@dataclass(frozen=True)
class Refuses:
    error: type[Exception]
    fragment: str


Answer = Runs | Warns | Refuses


@cache
def reference_digest(word: int, steps: int = STEPS) -> str:
    """The digest of ``steps`` steps from init with SET_LR ``word`` before the first, by the oracle."""
    pages, _ = ref.run([ref.init_page()], steps, grouped=False, lr_changes={0: word})
    return ref.digest(pages[0])


# --- the entry points: each takes the row's value (library) or text (command line) -------------


@dataclass(frozen=True)
class Outcome:
    digest: str | None  # None: refused
    error: BaseException | None  # the library's exception
    code: int  # a command's exit code (0 for the library's run)
    said: list[str]  # the warnings said (library) or the stderr lines (command line)


def _library(call: Callable[[], str]) -> Outcome:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            digest = call()
        except (TypeError, ValueError) as e:
            return Outcome(None, e, 2, [str(w.message) for w in said])
    return Outcome(digest, None, 0, [f"{w.category.__name__}: {w.message}" for w in said])


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str], read: Callable[[str], str] | None) -> Outcome:
    code = main(argv)
    out, err = capsys.readouterr()
    return Outcome(read(out) if code == 0 and read else None, None, code, err.splitlines())


def train_lr(value: Any, capsys: Any, tmp: Path) -> Outcome:
    return _library(lambda: meshnb.train(STEPS, set_lr={0: value}).digest)


def sweep_lr(value: Any, capsys: Any, tmp: Path) -> Outcome:
    return _library(lambda: meshnb.sweep(STEPS, lrs=[value]).digests[0])


def train_cli_lr(text: str, capsys: Any, tmp: Path) -> Outcome:
    argv = ["train", "--steps", str(STEPS), "--set-lr", f"0:{text}", "--json"]
    return _cli(capsys, argv, lambda out: json.loads(out)["systems"][0]["digest"])


def sweep_cli_lr(text: str, capsys: Any, tmp: Path) -> Outcome:
    argv = ["sweep", "--steps", str(STEPS), "--lr", text, "--json"]
    return _cli(capsys, argv, lambda out: json.loads(out)["systems"][0]["digest"])


def check_cli_lr(text: str, capsys: Any, tmp: Path) -> Outcome:
    """``meshnb check --view-in`` of the run the text names, against the page of the run whose word
    is 0x3f800000 (1.0): PASS (exit 0) means the check read the LR as that word."""
    (tmp / "in.page").write_bytes(ref.init_page())
    (tmp / "one.page").write_bytes(meshnb.train(STEPS, set_lr={0: np.uint32(0x3F800000)}).page)
    argv = ["check", "--view-in", str(tmp / "in.page"), "--page", str(tmp / "one.page"), "--steps", str(STEPS)]
    code = main([*argv, "--set-lr", f"0:{text}"])
    out, err = capsys.readouterr()
    digest = reference_digest(0x3F800000) if code == 0 and out.startswith("PASS") else None
    return Outcome(digest, None, code if code != 1 else 0, err.splitlines())


def check_lr(value: Any, capsys: Any, tmp: Path) -> Outcome:
    """The checker's library (``check.setup_from_run``, what ``meshnb check --view-in`` runs): the
    digest of the run it expects."""
    from meshnb.conformance import check
    from meshnb.view import View

    return _library(lambda: View.from_bytes(check.setup_from_run(PAGE, STEPS, set_lr={0: value}).expected[0]).digest())


LIBRARY = {"meshnb.train": train_lr, "meshnb.sweep": sweep_lr, "check.setup_from_run": check_lr}
COMMANDS = {"meshnb train": train_cli_lr, "meshnb sweep": sweep_cli_lr}
NAMED = {
    "meshnb.train": "set_lr[0]",
    "meshnb.sweep": "lrs[0]",
    "check.setup_from_run": "set_lr[0]",
    "meshnb train": "--set-lr",
    "meshnb sweep": "--lr",
}


@dataclass(frozen=True)
class Row:
    label: str
    value: Any  # the library's value (absent: None with library=False)
    text: str | None  # the command lines' text (None: no such text)
    answer: Answer  # the answer of every entry point, unless `by` says otherwise
    by: tuple[tuple[str, Answer], ...] = ()


ONE = 0x3F800000
# The LR rows: one answer per value, in every entry point; `by` only where a reading changed (an
# int was an f32 word in set_lr and --set-lr before: it is the number now, said once).
LR_ROWS = [
    Row("a float", 0.5, "0.5", Runs(0x3F000000)),
    Row("a negative float", -0.5, "-0.5", Runs(0xBF000000)),
    Row("a float rounded to float32", 0.01, "0.01", Runs(0x3C23D70A)),
    Row("float32", np.float32(0.01), None, Runs(0x3C23D70A)),
    Row("an exponent", 1e-3, "1e-3", Runs(0x3A83126F)),
    Row("inf", float("inf"), "inf", Runs(0x7F800000)),
    Row(
        "an int is the number",
        1,
        "1",
        Runs(ONE),
        by=(
            ("meshnb.train", Warns(ONE, "set_lr[0] = 1 is the number 1.0")),
            ("check.setup_from_run", Warns(ONE, "set_lr[0] = 1 is the number 1.0")),
            ("meshnb train", Warns(ONE, "--set-lr 0:1: 1 is the number 1")),
        ),
    ),
    Row(
        "numpy's int is the number",
        np.int64(1),
        None,
        Runs(ONE),
        by=(("meshnb.train", Warns(ONE, "numpy.uint32")), ("check.setup_from_run", Warns(ONE, "numpy.uint32"))),
    ),
    Row("an int 0 is 0.0: the same word, no warning", 0, "0", Runs(0)),
    Row("numpy.uint32 is the word", np.uint32(0x3F000000), None, Runs(0x3F000000)),
    Row("numpy.uint32 1 is the word 1", np.uint32(1), None, Runs(1)),
    Row("0x text is the word", "0x3f000000", "0x3f000000", Runs(0x3F000000)),
    Row("0x text of the word 1", "0x1", "0x1", Runs(1)),
    Row("a decimal as text", "0.5", None, Runs(0x3F000000)),
    Row("beyond float32", 1e40, "1e40", Refuses(OptionError, "beyond float32's range")),
    Row("beyond float64 as text", None, "1e400", Refuses(OptionError, "beyond float32's range")),
    Row("an int beyond float32", 1 << 128, None, Refuses(OptionError, "beyond float32's range")),
    Row("numpy.uint64(2^32)", np.uint64(1 << 32), None, Refuses(TypeError, "numpy.uint64")),
    Row("numpy.uint64(1)", np.uint64(1), None, Refuses(TypeError, "give numpy.uint32(...) for a word")),
    Row("a word of 9 hex digits", "0x1ffffffff", "0x1ffffffff", Refuses(OptionError, "at most 8 hex digits")),
    Row("'a'", "a", "a", Refuses(OptionError, "neither a number")),
    Row("1_0", "1_0", "1_0", Refuses(OptionError, "neither a number")),
    Row("True", True, None, Refuses(TypeError, "is an LR")),
    Row("None", None, None, Refuses(TypeError, "is an LR")),
    Row("bytes", b"0.5", None, Refuses(TypeError, "is an LR")),
]


def _cases() -> list[Any]:
    out = []
    for row in LR_ROWS:
        by = dict(row.by)
        for entry in LIBRARY:
            if row.value is not None or row.label == "None":
                out.append(pytest.param(row, entry, by.get(entry, row.answer), id=f"{row.label}-{entry}"))
        for entry in COMMANDS:
            if row.text is not None:
                out.append(pytest.param(row, entry, by.get(entry, row.answer), id=f"{row.label}-{entry}"))
    return out


def judge(outcome: Outcome, answer: Answer, entry: str) -> None:
    """The outcome is the answer: the digest of the word (the oracle's), the warning, or the error."""
    command = entry.startswith("meshnb ")
    if isinstance(answer, Refuses):
        assert outcome.digest is None, f"ran: {outcome}"
        if command:
            assert outcome.code == 2, outcome
            assert len(outcome.said) == 1 and "Traceback" not in outcome.said[0], outcome.said
            message = outcome.said[0]
        else:
            assert type(outcome.error) is answer.error, repr(outcome.error)
            message = str(outcome.error)
        assert answer.fragment in message, message
        assert NAMED[entry] in message, f"{NAMED[entry]!r} not named: {message}"
        assert f"{NAMED[entry]}[0]" not in message  # named as the caller wrote it (not set_lr[0][0])
        return
    assert outcome.code == 0 and outcome.digest == reference_digest(answer.word), outcome
    said = [s for s in outcome.said if "warning" in s.lower()]
    if isinstance(answer, Warns):
        assert len(said) == 1 and answer.fragment in said[0], said
    else:
        assert said == [], said


@pytest.mark.parametrize(("row", "entry", "answer"), _cases())
def test_an_lr_has_one_meaning(row: Row, entry: str, answer: Answer, capsys: Any, tmp_path: Path) -> None:
    run = {**LIBRARY, **COMMANDS}[entry]
    judge(run(row.value if entry in LIBRARY else row.text, capsys, tmp_path), answer, entry)


# `meshnb check --view-in` reads --set-lr as train does (the same flag): two rows through it, a
# number (the int 1, said once) and the same run as an explicit word; a refused value exits 2.
@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("1", Warns(ONE, "--set-lr 0:1: 1 is the number 1")),
        ("0x3f800000", Runs(ONE)),
        ("1.0", Runs(ONE)),
        ("1e40", Refuses(OptionError, "beyond float32's range")),
    ],
)
def test_check_reads_an_lr_as_train(text: str, answer: Answer, capsys: Any, tmp_path: Path) -> None:
    judge(check_cli_lr(text, capsys, tmp_path), answer, "meshnb train")


# --- the other values of the issue: the same answer from every entry point -----------------------

PAGE = ref.init_page()


def _page_file(tmp: Path, data: bytes) -> str:
    path = tmp / "p.page"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize(
    ("label", "call", "answer"),
    [
        # a 10-byte view_in: an OptionError naming view_in, from both
        ("10 bytes to train", lambda t: meshnb.train(STEPS, view_in=b"0123456789"), "view_in has 10 bytes"),
        ("10 bytes to sweep", lambda t: meshnb.sweep(STEPS, view_in=b"0123456789"), "view_in has 10 bytes"),
        ("a 10-byte file to train", lambda t: meshnb.train(STEPS, view_in=_page_file(t, b"0" * 10)), "view_in "),
        ("a 10-byte file to sweep", lambda t: meshnb.sweep(STEPS, view_in=_page_file(t, b"0" * 10)), "view_in "),
        ("set_lr's 1e40 named as written", lambda t: meshnb.train(STEPS, set_lr={0: 1e40}), "set_lr[0] = 1e+40"),
        ("lrs' 1e40 named as written", lambda t: meshnb.sweep(STEPS, lrs=[0.5, 1e40]), "lrs[1] = 1e+40"),
        ("10 bytes to the checker", lambda t: _setup(b"0123456789"), "view_in has 10 bytes"),
    ],
)
def test_a_bad_value_is_one_option_error(label: str, call: Callable[[Path], Any], answer: str, tmp_path: Path):
    with pytest.raises(OptionError) as e:
        call(tmp_path)
    assert answer in str(e.value) and "[0][0]" not in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "lrs", [np.array([1], np.uint64), np.array([True]), [np.uint64(1)], np.array([1 << 32], np.uint64)]
)
def test_an_lr_array_is_read_as_its_items(lrs: Any) -> None:
    """An array's dtype is its items' type: numpy.uint64 and bool arrays are TypeErrors as their items are."""
    with pytest.raises(TypeError, match=r"lrs\[0\]"):
        meshnb.sweep(STEPS, lrs=lrs)


def _setup(view_in: Any) -> Any:
    from meshnb.conformance import check

    return check.setup_from_run(view_in, STEPS)


def test_a_path_as_view_in_is_read_by_train_and_sweep_alike(tmp_path: Path) -> None:
    path = _page_file(tmp_path, PAGE)
    want = ref.digest(ref.run([PAGE], STEPS, grouped=False)[0][0])
    assert meshnb.train(STEPS, view_in=path).digest == want
    assert meshnb.sweep(STEPS, view_in=path).digests[0] == want
    assert meshnb.sweep(STEPS, view_in=Path(path)).digests[0] == meshnb.train(STEPS, view_in=Path(path)).digest


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--steps", "1_0"],
        ["sweep", "--steps", "1_0"],
        ["check", "--view-in", "in.page", "--page", "in.page", "--steps", "1_0"],
        ["check", "--view-in", "in.page", "--page", "in.page", "--steps-per-task", "1_0"],
        ["check", "--view-in", "in.page", "--page", "in.page", "--systems", "1_0"],
        ["check", "--view-in", "in.page", "--page", "in.page", "--system", "1_0"],
    ],
)
def test_a_count_is_ascii_digits_in_every_command(argv: list[str], capsys: Any) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "'1_0' is not a whole number" in err[-1], err


@pytest.mark.parametrize("steps", ["10", 10.0, True])
def test_steps_of_another_type_is_a_type_error_in_the_library(steps: Any) -> None:
    for run in (meshnb.train, meshnb.sweep):
        with pytest.raises(TypeError, match="steps must be an integer"):
            run(steps)


def test_a_clusters_timing_flag_is_its_keyword(capsys: Any) -> None:
    """``timeout_ms=5`` without a cluster is accepted (a script may give every run the same
    keywords; one system alone has no rounds to time); ``--timeout-ms 5`` there, typed where it
    means nothing, is refused (issue 51); a bad value refused by both."""
    lib = meshnb.train(STEPS, timeout_ms=5).digest
    assert lib == reference_digest(0x3F000000)
    assert main(["train", "--steps", str(STEPS), "--timeout-ms", "5", "--json"]) == 2
    assert "--timeout-ms is a round's timeout: one system alone has no rounds" in capsys.readouterr().err
    with pytest.raises(OptionError, match="timeout_ms must be a number above 0"):
        meshnb.train(STEPS, timeout_ms=0)
    assert main(["train", "--steps", str(STEPS), "--timeout-ms", "0"]) == 2
    assert "--timeout-ms" in capsys.readouterr().err


def test_several_changes_at_one_step_apply_in_order_everywhere() -> None:
    """``train``, the checker's run rule (a case file's entries) and a plan keep both, in order:
    the last one's word stays (a case file refused two entries at one step before)."""
    from meshnb.conformance import check
    from meshnb.runspec import LrChange

    twice = [LrChange(0, 0x3E800000), LrChange(0, 0x3F000000)]
    assert check.run_bounds(STEPS, 64, 0, twice) == tuple(twice)
    last = meshnb.train(STEPS, set_lr=[(0, np.uint32(0x3E800000)), (0, np.uint32(0x3F000000))]).digest
    assert last == reference_digest(0x3F000000) != reference_digest(0x3E800000)


def _zero_spt_page() -> bytes:
    page = bytearray(PAGE)
    page[20:24] = (0).to_bytes(4, "little")  # STEPS_PER_TASK (SPEC 7)
    return bytes(page)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"step_base": 2**64 - 3}, "system 0: steps 18446744073709551613 .. 18446744073709551615 reach 2^64-1"),
        ({"view_in": _zero_spt_page()}, "system 0: the page's STEPS_PER_TASK is 0"),
    ],
)
def test_train_and_sweep_describe_a_run_alike_and_refuse_it_up_front(keywords: dict[str, Any], message: str) -> None:
    """One description (runspec.Systems) and its rules: the same refusal, before anything runs,
    from train's options, the sweep's options and both entry points."""
    from meshnb.options import RunOptions
    from meshnb.sweeps import SweepOptions

    calls: list[Callable[[], Any]] = [
        lambda: RunOptions(steps=3, **keywords),
        lambda: SweepOptions(steps=3, **keywords).describe(),
        lambda: meshnb.train(3, **keywords),
        lambda: meshnb.sweep(3, **keywords),
    ]
    for call in calls:
        with pytest.raises(OptionError) as e:
            call()
        assert str(e.value).startswith(message), str(e.value)
    one, sweep_one = RunOptions(steps=3).describe(), SweepOptions(steps=3).describe()
    assert len(one) == len(sweep_one) == 1 and np.array_equal(one.words(0, 1), sweep_one.words(0, 1))


# --- a run's values: the same refusal from train, sweep, the checker and a checkpoint header ------

WRAP = 2**64 - 3  # steps 2^64 - 3 .. 2^64 - 1: the third reaches 2^64 - 1, whose round would wrap


@dataclass(frozen=True)
class RunRow:
    label: str
    train: dict[str, Any]  # meshnb.train's keywords
    sweep: dict[str, Any] | None  # meshnb.sweep's (None: it has no such value)
    bounds: tuple[Any, ...] | None  # check.run_bounds' (steps, steps_per_task, step_base, set_lr); None: its own bound
    header: dict[str, Any]  # the checkpoint header's run fields changed
    field: str  # the header's field named
    fragment: str  # runspec's one message of the value


RUN_ROWS = [
    RunRow(
        "steps past 2^63 - 1",
        {"steps": 2**63},
        {"steps": 2**63},
        None,  # the checker's own bound (MAX_CHECK_STEPS) comes first
        {"steps": 2**63},
        "steps",
        "steps must be an integer from 0 to 9223372036854775807, got 9223372036854775808",
    ),
    RunRow(
        "a run past step 2^64 - 2",
        {"steps": 3, "step_base": WRAP},
        {"steps": 3, "step_base": WRAP},
        (3, 64, WRAP, {}),
        {"steps": 3, "first_step": WRAP, "step_base": WRAP},
        "steps",
        "steps 18446744073709551613 .. 18446744073709551615 reach 2^64-1, whose round would wrap to 0",
    ),
    RunRow(
        "a step base past 2^64 - 2",
        {"steps": STEPS, "step_base": 2**64 - 1},
        {"steps": STEPS, "step_base": 2**64 - 1},
        (STEPS, 64, 2**64 - 1, {}),
        {"first_step": 2**64 - 1, "step_base": 2**64 - 1},
        "first_step",
        "step_base must be 0..2^64-2, got 18446744073709551615",
    ),
    RunRow(
        "STEPS_PER_TASK 0",
        {"steps": STEPS, "steps_per_task": 0},
        None,
        (STEPS, 0, 0, {}),
        {"steps_per_task": 0},
        "steps_per_task",
        "steps_per_task must be an integer from 1 to 4294967295, got 0",
    ),
    RunRow(
        "an LR change after the last step",
        {"steps": STEPS, "set_lr": {STEPS + 1: 0.5}},
        None,
        (STEPS, 64, 0, {STEPS + 1: 0.5}),
        {"set_lr": [[STEPS + 1, 0x3F000000]]},
        "set_lr[0]",
        f"set_lr's step must be an integer from 0 to {STEPS}, got {STEPS + 1}",
    ),
]


@pytest.mark.parametrize("row", RUN_ROWS, ids=[r.label for r in RUN_ROWS])
def test_a_bad_run_is_one_refusal_everywhere(row: RunRow) -> None:
    """Issue 32: a checkpoint header's run is read by runspec's rules, as train's, sweep's (the
    CUDA host's too: it takes the sweep's run) and the checker's are: the same message, the
    header's naming its JSON field (``run.FIELD: ``) where the library's names the system (a
    header's members start from one page: no system to name)."""
    from meshnb.checkpoint import CheckpointError, RunSettings
    from meshnb.conformance import check
    from meshnb.cuda import host
    from meshnb.runspec import describe

    calls: list[Callable[[], Any]] = [lambda: meshnb.train(**row.train)]
    if row.sweep is not None:  # the sweep's run, on the CPU and on the CUDA host (refused before the device)
        calls.append(lambda: meshnb.sweep(**row.sweep))
        calls.append(lambda: host.run_systems(describe(**row.sweep)))
    if row.bounds is not None:
        calls.append(lambda: check.run_bounds(*row.bounds))
    for call in calls:
        with pytest.raises(OptionError) as e:
            call()
        assert type(e.value) is OptionError and row.fragment in str(e.value), str(e.value)
    doc = {**RunSettings(2, STEPS, None, (), None, True, 0).to_json(), **row.header}
    with pytest.raises(CheckpointError) as h:
        RunSettings.from_json(doc)
    assert str(h.value) == f"run.{row.field}: {row.fragment}", str(h.value)
