"""What a check found, typed: the :class:`Report` and its parts (``TypedDict`` s, so that ``to_json`` is the
fields as they are), and the report as text and JSON, made from them alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict

Verdict = Literal["PASS", "FAIL"]


def printable(text: str) -> str:
    """``text`` with control characters (newlines, ANSI escapes) escaped: a name read from a file cannot
    forge a line of the report.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class _WordDiffKeys(TypedDict):
    field: str  # "PARAMS[2]", "LR", "reserved@1200"
    offset: int  # its byte offset in the page
    expected: str  # meshnb's word, 8 hex digits
    got: str  # the executor's


class WordDiff(_WordDiffKeys, total=False):
    """One differing page word, named from the layout table (SPEC 7)."""

    expected_f32: str  # an f32 field's words as floats
    got_f32: str
    step: int | None  # LOSS[i]: the step whose loss it holds (None: not written by the run)
    sample: int  # X[i], Y[i]: the sample, and how far apart the two words are
    ulps: int


class SampleDiff(TypedDict):
    """A sample word (``X[i]``, ``Y[i]``) that differs, and by how many ulps."""

    field: str
    ulps: int


class TracePart(TypedDict):
    """The first step whose applied sums differ."""

    step: int  # of this run (0: its first step)
    absolute_step: int  # the page's step counter at it
    sums: list[str]  # which of the five sums differ
    expected: list[str]  # the five words, hex
    got: list[str]


# The first task-boundary page that differs: the task runs steps "from" .. "steps_done" of the run
# ("from" is a keyword, hence the functional form); "file" is N.page, "fields" its differing fields
# (the first 20).
TaskPart = TypedDict("TaskPart", {"from": int, "steps_done": int, "file": str, "fields": list[str]})


class ModelNote(TypedDict):
    """A fault model as a report names it: its name and what it does."""

    name: str
    doc: str


class Counterfactual(TypedDict):
    """A single-op change that reproduces the executor's bits (:mod:`.localise`): the op of the step's
    dataflow and its alternative rule.
    """

    op: str  # the op's id
    alt: str  # the alternative
    step: int  # the step it changes (of this run)
    lanes: list[int]  # the lanes whose value it changes (per-lane ops; else empty)
    text: str  # the finding in words
    holds: int  # the steps from it on that the executor with that one change reproduces (the trace's rows)


class _LocalisationKeys(TypedDict):
    where: str  # what was localised: "step 44" or the page's first differing word
    found: list[Counterfactual]  # every single-op change that reproduces the bits compared
    page: list[str]  # what the page's differing words are (a shifted ring index, a sign, ...)
    searched: int  # changes tried
    space: int  # of so many
    seconds: float  # the search's time


class Localisation(_LocalisationKeys, total=False):
    """Which single op the executor computes otherwise (:mod:`.localise`), or the closest change."""

    closest: str  # no single-op change reproduces the bits: the nearest one, and how near
    cut_short: str  # the time bound stopped the search: what was left


class _DiagnosisKeys(TypedDict):
    how: str  # what was replayed and compared ("not made" when skipped)
    models: list[ModelNote]  # those that reproduce every bit compared


class Diagnosis(_DiagnosisKeys, total=False):
    """Which fault models reproduce the executor's bits (:mod:`.diagnosis`)."""

    skipped: str  # why the diagnosis was not made
    first_step_only: list[ModelNote]  # reproduce the first differing step, part later
    not_replayed: list[ModelNote]  # part from meshnb too long before the part compared to be replayed
    lanes: str  # meshnb's lane values where no model reproduces the bits
    localisation: Localisation  # where no model does: the single op computed otherwise


@dataclass
class Report:
    """Everything a check found: the verdict, where the bits part, and why (the diagnosis).

    Parameters
    ----------
    verdict : {"PASS", "FAIL"}
        Whether every bit compared is meshnb's.
    case : str
        The case's name.
    system : int
        The system checked.
    diff : list of WordDiff, default []
        The differing page words.
    trace : TracePart, optional
        The first step whose applied sums differ.
    task : TaskPart, optional
        The first task-boundary page that differs.
    samples : list of SampleDiff, default []
        The sample words that differ, by how many ulps.
    diagnosis : Diagnosis, optional
        The fault models that reproduce the bits, or the single op computed otherwise.
    notes : list of str, default []
        What the check says beside the verdict.

    Examples
    --------
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.check import check, executor_run, setup_from_run
    >>> from meshnb.testing.reference import init_page
    >>> setup = setup_from_run(init_page(), 16)
    >>> got = executor_run(setup, faults.model("fma-horner"))
    >>> report = check(setup, got.pages[0], got_trace=got.trace)
    >>> report.verdict, report.exit_code, report.case, len(report.diff), report.trace["sums"]
    ('FAIL', 1, 'view-in', 6, ['e', 'e*x', 'e*x2'])
    """

    verdict: Verdict
    case: str
    system: int
    diff: list[WordDiff] = field(default_factory=list)
    trace: TracePart | None = None
    task: TaskPart | None = None
    samples: list[SampleDiff] = field(default_factory=list)
    # a Diagnosis (typed as a Mapping, so that ``(report.diagnosis or {}).get(...)`` type-checks)
    diagnosis: Mapping[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 for PASS, 1 for FAIL (the command's exit code)."""
        return 0 if self.verdict == "PASS" else 1

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values (``check --json``).

        Returns
        -------
        dict
            Every field of the report, as plain dicts, lists and strings.

        Examples
        --------
        >>> import json
        >>> from meshnb.conformance.check import check, setup_from_run
        >>> from meshnb.testing.reference import init_page
        >>> setup = setup_from_run(init_page(), 4)
        >>> doc = check(setup, setup.expected[0]).to_json()
        >>> json.dumps(doc)[:60], sorted(doc)[:4]
        ('{"verdict": "PASS", "case": "view-in", "system": 0, "diff": ', ['case', 'diagnosis', 'diff', 'notes'])
        """
        return asdict(self)

    def text(self) -> str:
        """The report as ``check`` prints it: the verdict line, notes, diff, trace, diagnosis.

        Returns
        -------
        str
            The lines, without a final newline.

        Examples
        --------
        >>> from meshnb.conformance import faults
        >>> from meshnb.conformance.check import check, executor_run, setup_from_run
        >>> from meshnb.testing.reference import init_page
        >>> setup = setup_from_run(init_page(), 16)
        >>> got = executor_run(setup, faults.model("fma-horner"))
        >>> text = check(setup, got.pages[0], got_trace=got.trace).text()
        >>> print("\\n".join(text.splitlines()[:3]))
        FAIL: case view-in, system 0: 6 page words differ; trace parts at step 1 (of this run)
        page diff (field: expected -> got):
          PARAMS[0]        bc80286a -> bc802868  -0.015644270926713943 -> -0.015644267201423645
        >>> print(text.splitlines()[-1])
          reproduced by fma-horner: FMA contraction in the Horner polynomial
        """
        lines = [self._headline(), *(f"note: {n}" for n in self.notes)]
        lines += self._diff_lines()
        if self.trace:
            t = self.trace
            lines.append(
                f"trace: first differing step {t['step']} (absolute step {t['absolute_step']}): {', '.join(t['sums'])}"
            )
            lines.append("  expected " + " ".join(t["expected"]) + "\n  got      " + " ".join(t["got"]))
        if self.task:
            lines.append(
                f"pages: the first differing task runs steps {self.task['from']} .. {self.task['steps_done']}"
                f" ({self.task['file']})"
            )
        if self.samples:
            lines.append("samples: " + ", ".join(f"{s['field']} by {s['ulps']} ulps" for s in self.samples))
        if self.diagnosis:
            lines += _diagnosis_lines(self.diagnosis)
        return "\n".join(lines)

    def _headline(self) -> str:
        what = []
        if self.diff:
            what.append(f"{len(self.diff)} page words differ")
        if self.trace:
            what.append(f"trace parts at step {self.trace['step']} (of this run)")
        if self.task:
            what.append(f"first differing task ends after {self.task['steps_done']} steps")
        return f"{self.verdict}: case {printable(self.case)}, system {self.system}" + (
            f": {'; '.join(what)}" if what else ""
        )

    def _diff_lines(self, shown: int = 40) -> list[str]:
        if not self.diff:
            return []
        lines = ["page diff (field: expected -> got):"]
        for d in self.diff[:shown]:
            extra = ""
            if "step" in d:
                step = d["step"]
                extra = f"  (loss of step {step})" if step is not None else "  (not written by this run)"
            if "sample" in d:
                extra = f"  (sample {d['sample']}, {d.get('ulps')} ulps)"
            fl = f"  {d['expected_f32']} -> {d['got_f32']}" if "expected_f32" in d and "got_f32" in d else ""
            lines.append(f"  {d['field']:<16} {d['expected']} -> {d['got']}{fl}{extra}")
        if len(self.diff) > shown:
            lines.append(f"  ... {len(self.diff) - shown} more")
        return lines


def _diagnosis_lines(dg: Mapping[str, Any]) -> list[str]:
    if dg.get("skipped"):
        return [f"diagnosis not made: {dg.get('skipped')}"]
    lines = [f"diagnosis ({dg['how']}):"]
    if dg["models"]:
        lines += [f"  reproduced by {m['name']}: {m['doc']}" for m in dg["models"]]
    else:
        lines.append("  no fault model reproduces these bits")
    for m in dg.get("first_step_only", []):
        lines.append(f"  reproduces the first differing step only (parts later): {m['name']}")
    if dg.get("not_replayed"):
        names = ", ".join(m["name"] for m in dg["not_replayed"])
        lines.append(f"  not replayed (they part from meshnb too long before the part compared): {names}")
    for m in dg.get("not_proved", []):
        lines.append(f"  reproduces the part compared, but ruled out by experiment (not the cause): {m['name']}")
    if dg.get("localisation"):
        lines += localisation_lines(dg["localisation"])
        for f in dg["localisation"].get("not_proved", []):
            text = f["text"] if isinstance(f, Mapping) else f
            lines.append(f"  reproduces the part compared, but ruled out by experiment (not the cause): {text}")
    if dg.get("experiment"):
        lines += experiment_lines(dg["experiment"])
    if dg.get("lanes"):
        lines.append(dg.get("lanes", ""))
    return lines


def experiment_lines(exp: Mapping[str, Any]) -> list[str]:
    """The experiments (the executor run from meshnb's pages) as the report's lines."""
    if exp.get("skipped"):
        return [f"  experiments not made: {exp['skipped']}"]
    loc = exp["location"]
    cut = ", cut short" if loc.get("cut_short") else ""
    runs = f"{loc['runs']} executor runs from meshnb's pages, {loc['seconds']} s{cut}"
    lines = [f"  seen by experiment ({runs}): {loc['where']}"]
    proof = exp.get("proof")
    if proof is not None:
        if proof["proved"]:
            lines.append(
                f"  cause proved: {', '.join(proof['proved'])} (reproduces the executor's outputs on every one of "
                f"{proof.get('experiments', 0)} experiments)"
            )
        else:
            lines.append("  cause not proved")
        for name, why in proof.get("ruled_out", {}).items():
            lines.append(f"  ruled out by experiment: {name} ({why})")
    ex = exp.get("explanation")
    if ex is not None:
        lines += _designed_lines("designed experiments", "candidate causes", ex)
    for key, what in (("header", "header rules"), ("page", "page rules")):
        rx = exp.get(key)
        if rx is not None and rx != ex:
            lines += _designed_lines(what, "candidates", rx)
    return lines


def _designed_lines(what: str, noun: str, ex: Mapping[str, Any]) -> list[str]:
    lines = [
        f"  {what} ({ex['candidates']} {noun}, {ex['ruled_out']} ruled out, {ex['runs']} executor runs on designed "
        f"pages, {ex['seconds']} s): {ex['sentence']}"
    ]
    for e in ex.get("experiments", []):
        lines.append(f"    {e['name']}: {e['about']}" + (f" (differs: {e['what']})" if e.get("differs") else ""))
    return lines


def localisation_lines(loc: Mapping[str, Any]) -> list[str]:
    """The localisation as the report's lines (the first is its summary, the JUnit message's)."""
    head = f"  localisation ({loc['where']}"
    if loc.get("space"):
        head += f", {loc['searched']} of {loc['space']} single-op changes tried, {loc['seconds']:.1f} s"
    head += "): "
    lines = []
    if loc["found"]:
        for i, c in enumerate(loc["found"]):
            held = f" (the executor with that change reproduces {c['holds']} steps from it)" if c["holds"] > 1 else ""
            lines.append((head if i == 0 else "    or ") + c["text"] + held)
    for i, p in enumerate(loc["page"]):
        lines.append((head if not lines and i == 0 else "    ") + p)
    if not lines and not loc.get("space"):
        lines.append(head + "no simple transformation of meshnb's page makes it")
    if not lines:
        what = "reproduced by no single-op change"
        if loc.get("closest"):
            what += f"; closest: {loc.get('closest')}"
        lines.append(head + what)
    if loc.get("cut_short"):
        lines.append(f"    the time bound cut the search short: {loc.get('cut_short')}")
    return lines


def localisation_summary(loc: Mapping[str, Any]) -> str:
    """The localisation in one line (a suite's message, JUnit's failure message)."""
    if loc["found"]:
        said = [c["text"] + (f" (holds {c['holds']} steps)" if c["holds"] > 1 else "") for c in loc["found"][:3]]
        return " or ".join(said) + (" ..." if len(loc["found"]) > 3 else "")
    if loc["page"]:
        return f"{loc['where']}: " + "; ".join(loc["page"])
    if not loc.get("space"):  # only the page differs
        return f"{loc['where']}: no simple transformation of meshnb's page makes it"
    out = f"{loc['where']}: reproduced by no single-op change"
    if loc.get("closest"):
        out += f"; closest: {loc.get('closest')}"
    return out
