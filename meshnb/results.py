"""What a run gives back: every system's result, an interrupted run's state, a cluster's failure.

A cluster's member (:class:`SystemResult`) and a sweep's system
(:class:`~meshnb.sweeps.result.SweepSystem`) answer every shared column of :data:`SYSTEM_COLUMNS`
with the same type (:class:`SystemColumns`); a few columns exist for one kind alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from .program import COUNTER_NAMES, Context
from .view import View


@dataclass(frozen=True)
class Column:
    """One column of the system model: an attribute a system's result answers, its type, and which
    kind of result has it.
    """

    name: str
    kind: type
    doc: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    only: Literal["cluster", "sweep"] | None = None
    optional: bool = False

    def conforms(self, value: Any) -> bool:
        """Whether ``value`` has this column's type (an array its dtype and shape, a dict the counters' names)."""
        if value is None:
            return self.optional
        if type(value) is not self.kind and not (self.kind is np.ndarray and isinstance(value, np.ndarray)):
            return False  # exact: a bool is no int, a float64 no float32
        if isinstance(value, np.ndarray):
            shape = self.shape or ()
            return (
                value.dtype == np.dtype(self.dtype)
                and value.ndim == len(shape)
                and all(want in (-1, got) for want, got in zip(shape, value.shape))
            )
        if isinstance(value, dict):
            return tuple(value) == COUNTER_NAMES and all(type(v) is int for v in value.values())
        return True


SYSTEM_COLUMNS: tuple[Column, ...] = (
    Column("system", int, "the system's number in its run (a member k of a cluster, 0 alone; a sweep's index)"),
    Column("params", np.ndarray, "the final params [a, b, c, d]", "float32", (4,)),
    Column("params_hex", list, "the params as four hex words ('3b7a7664', ...)"),
    Column("last_loss", np.float32, "the loss of the last step run"),
    Column("loss", np.ndarray, "the loss ring: the loss of step t at index t mod 256", "float32", (256,)),
    Column("page", bytes, "the final 4096-byte page (a sweep keeps it with keep_pages, else runs the system again)"),
    Column("view", View, "the final page as a View (a copy)"),
    Column("digest", str, "SPEC 11's digest: SHA-256 of PARAMS then LOSS, 64 hex digits"),
    Column("trace_digest", str, "SPEC 11's trace digest, 64 hex digits ('': a sweep without trace kept none)"),
    Column(
        "counters", dict,
        "SPEC 8's counters inits, steps, timeouts of this run (a sweep starts every system from a page: "
        "inits 0, timeouts 0, as train(view_in=that page) counts)",
    ),
    Column("trace", np.ndarray, "the applied sums [steps, 5], with keep_trace", "uint32", (-1, 5), "cluster", True),
    Column("lr", np.float32, "the LR as the steps read it (ftz_from_bits in mode Z)", only="sweep"),
    Column("lr_word", int, "the LR word as the page holds it", only="sweep"),
    Column("step_base", int, "the system's first step", only="sweep"),
    Column("page_index", int, "which of the sweep's start pages it started from", only="sweep"),
)  # fmt: skip
"""The column model of a system's result: every attribute a cluster's member and a sweep's system
answer (``only`` None: both, with the same type), and the few one kind alone has."""

SHARED_COLUMNS: tuple[str, ...] = tuple(c.name for c in SYSTEM_COLUMNS if c.only is None)
"""The names of the columns both kinds answer (:class:`SystemColumns`)."""


@runtime_checkable
class SystemColumns(Protocol):
    """What every system's result answers, a cluster's member and a sweep's system alike: the shared
    columns of :data:`SYSTEM_COLUMNS`, and ``to_json``.
    """

    @property
    def system(self) -> int: ...
    @property
    def params(self) -> NDArray[np.float32]: ...
    @property
    def params_hex(self) -> list[str]: ...
    @property
    def last_loss(self) -> np.float32: ...
    @property
    def loss(self) -> NDArray[np.float32]: ...
    @property
    def page(self) -> bytes: ...
    @property
    def view(self) -> View: ...
    @property
    def digest(self) -> str: ...
    @property
    def trace_digest(self) -> str: ...
    @property
    def counters(self) -> dict[str, int]: ...
    def to_json(self) -> dict[str, Any]: ...


def shared_columns(s: SystemColumns) -> dict[str, Any]:
    """The shared columns of a system's result, by name (:data:`SHARED_COLUMNS`)."""
    return {name: getattr(s, name) for name in SHARED_COLUMNS}


def system_json(s: SystemColumns) -> dict[str, Any]:
    """A system as ``meshnb train --json`` prints it (a member's or a sweep system's, the same keys)."""
    return {
        "system": s.system,
        "params": s.params_hex,
        "digest": s.digest,
        "trace_digest": s.trace_digest,
        "counters": dict(s.counters),
    }


class ClusterError(RuntimeError):
    """A member of a cluster failed, died, or made no progress.

    Parameters
    ----------
    system : int or None
        The member that failed (None: the cluster as a whole).
    detail : str
        The message without the system.

    Examples
    --------
    >>> e = ClusterError(2, "no step completed in 60 s")
    >>> str(e), e.system, e.detail
    ('system 2: no step completed in 60 s', 2, 'no step completed in 60 s')
    """

    def __init__(self, system: int | None, detail: str) -> None:
        super().__init__(detail if system is None else f"system {system}: {detail}")
        self.system, self.detail = system, detail


@dataclass(frozen=True)
class SystemResult:
    """One system at the end of a run (the columns of :data:`SYSTEM_COLUMNS`, as a sweep's system).

    Parameters
    ----------
    system : int
        The system's number in its run (a cluster's member ``k``; 0 alone).
    page : bytes
        Its final 4096-byte page.
    counters : dict of str to int
        Its counters (``inits``, ``steps``, ``timeouts``).
    trace_digest : str
        SPEC 11's trace digest, as hex.
    trace : numpy.ndarray or None, default None
        The applied sums, ``[steps, 5]`` uint32, with ``keep_trace``.

    Examples
    --------
    >>> import meshnb
    >>> s = meshnb.train(64, systems=2, backend="fused").systems[1]
    >>> s.system, len(s.page)
    (1, 4096)
    """

    system: int
    page: bytes = field(repr=False)
    counters: dict[str, int]
    trace_digest: str
    trace: NDArray[np.uint32] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (
            f"SystemResult(system={self.system}, digest={self.digest[:16]}..., last_loss={float(self.last_loss)!r}, "
            f"counters={self.counters})"
        )

    @property
    def view(self) -> View:
        """The final page as a :class:`~meshnb.view.View` (a copy: the result stays as it was)."""
        return View.from_bytes(self.page)

    @property
    def params(self) -> NDArray[np.float32]:
        """The params ``[a, b, c, d]`` (float32[4])."""
        return np.asarray(self.view["PARAMS"], dtype=np.float32)

    @property
    def params_hex(self) -> list[str]:
        """The params as four hex words (``'3b7a7664'`` ...)."""
        return [f"{w:08x}" for w in self.view.array("PARAMS").view(np.uint32)]

    @property
    def loss(self) -> NDArray[np.float32]:
        """The loss ring: the loss of step t at index t mod 256 (float32[256])."""
        return np.asarray(self.view["LOSS"], dtype=np.float32)

    @property
    def last_loss(self) -> np.float32:
        """The loss of the last step run (LOSS at the page's next step - 1, mod 256)."""
        v = self.view
        return np.float32(v["LOSS"][(v.next_step - 1) % 256])

    @property
    def digest(self) -> str:
        """SPEC 11's digest: SHA-256 of PARAMS followed by LOSS, as hex."""
        return self.view.digest()

    def to_json(self) -> dict[str, Any]:
        """The system as ``meshnb train --json`` prints it.

        Returns
        -------
        dict
            ``system``, ``params`` (hex words), ``digest``, ``trace_digest``, ``counters``.

        Examples
        --------
        >>> import meshnb
        >>> sorted(meshnb.train(8).systems[0].to_json())
        ['counters', 'digest', 'params', 'system', 'trace_digest']
        """
        return system_json(self)


@dataclass(frozen=True)
class RunResult:
    """A run: every system's result; the single-system fields read system 0.

    Parameters
    ----------
    steps : int
        The steps this call ran.
    systems : tuple of SystemResult
        Every system's result, in system order.
    seconds : float
        The steps' time, the first call's load or compile apart.
    first_call_seconds : float, default 0.0
        What loading (or compiling) the step loop took.
    steps_before : int, default 0
        The steps of the run done before this call (a resumed checkpoint's).

    Examples
    --------
    >>> import meshnb
    >>> r = meshnb.train(4096)  # vectors.json's one system
    >>> r.steps, r.params_hex
    (4096, ['3b7a7664', '402bef3f', '3b898b47', 'c0386fbf'])
    """

    steps: int
    systems: tuple[SystemResult, ...]
    seconds: float
    first_call_seconds: float = 0.0
    steps_before: int = 0  # steps of the run done before this call (a resumed checkpoint's)

    def __repr__(self) -> str:
        more = f", run_steps={self.run_steps}" if self.steps_before else ""
        return (
            f"RunResult(steps={self.steps}{more}, systems={len(self.systems)}, digest={self.digest[:16]}..., "
            f"seconds={self.seconds:.3f})"
        )

    @property
    def run_steps(self) -> int:
        """The whole run's steps done so far (this call's plus a resumed checkpoint's)."""
        return self.steps_before + self.steps

    @property
    def steps_per_second(self) -> float:
        """Steps (a cluster: lockstep rounds) per second of this call, compile time excluded."""
        return self.steps / self.seconds if self.seconds > 0 else float("inf")

    # System 0's result, as attributes of the run (one system's run reads as that system).

    @property
    def page(self) -> bytes:
        """System 0's final 4096-byte view page."""
        return self.systems[0].page

    @property
    def view(self) -> View:
        """System 0's final page as a :class:`~meshnb.view.View`."""
        return self.systems[0].view

    @property
    def params(self) -> NDArray[np.float32]:
        """System 0's params ``[a, b, c, d]`` (float32[4])."""
        return self.systems[0].params

    @property
    def params_hex(self) -> list[str]:
        """System 0's params as four hex words."""
        return self.systems[0].params_hex

    @property
    def loss(self) -> NDArray[np.float32]:
        """System 0's loss ring: the loss of step t at index t mod 256 (float32[256])."""
        return self.systems[0].loss

    @property
    def last_loss(self) -> np.float32:
        """System 0's loss of the last step run."""
        return self.systems[0].last_loss

    @property
    def counters(self) -> dict[str, int]:
        """System 0's counters: ``inits``, ``steps``, ``timeouts``."""
        return self.systems[0].counters

    @property
    def digest(self) -> str:
        """System 0's digest (SPEC 11): SHA-256 of PARAMS then LOSS; every member has the same."""
        return self.systems[0].digest

    @property
    def trace_digest(self) -> str:
        """System 0's trace digest (SPEC 11): SHA-256 of the sums each step of this run applied."""
        return self.systems[0].trace_digest

    @property
    def trace(self) -> NDArray[np.uint32] | None:
        """System 0's applied sums, ``[steps, 5]`` uint32, when the run kept them (``keep_trace``)."""
        return self.systems[0].trace

    def to_json(self) -> dict[str, Any]:
        """The run as ``meshnb train --json`` prints it.

        Returns
        -------
        dict
            ``steps``, ``run_steps`` (a resumed run's) and ``systems`` (each :meth:`SystemResult.to_json`).

        Examples
        --------
        >>> import meshnb
        >>> doc = meshnb.train(64, systems=2, backend="fused").to_json()
        >>> doc["steps"], [s["system"] for s in doc["systems"]]
        (64, [0, 1])
        """
        doc: dict[str, Any] = {"steps": self.steps}
        if self.steps_before:  # a resumed run: the whole run's steps too
            doc["run_steps"] = self.run_steps
        doc["systems"] = [s.to_json() for s in self.systems]
        return doc


class SaveFailed(OSError):
    """The run ended but its final checkpoint could not be written; the previous one is intact.

    Parameters
    ----------
    result : RunResult
        The run, whole.
    error : OSError
        The write's error.

    Examples
    --------
    >>> import meshnb
    >>> str(SaveFailed(meshnb.train(8), OSError("cannot write run.ckpt: no space left on device")))
    'cannot write run.ckpt: no space left on device'
    """

    def __init__(self, result: RunResult, error: OSError) -> None:
        super().__init__(error.errno, str(error))
        self.result, self.error = result, error

    def __str__(self) -> str:
        return str(self.error)


class RunInterrupted(Exception):
    """Ctrl-C during a run.

    Parameters
    ----------
    result : RunResult
        Every system as of the last completed task (its ``steps`` the steps done).

    Examples
    --------
    >>> import meshnb
    >>> e = RunInterrupted(meshnb.train(64))
    >>> str(e), e.result.steps
    ('interrupted after 64 steps', 64)
    """

    def __init__(self, result: RunResult) -> None:
        super().__init__(f"interrupted after {result.steps} steps")
        self.result = result


def system_result(system: int, ctx: Context) -> SystemResult:
    """System ``system``'s result from its context (the trace's digest waits for its last record)."""
    trace = ctx.trace
    return SystemResult(
        system=system,
        page=ctx.view.tobytes(),
        counters=ctx.counter_dict(),
        trace_digest=trace.hexdigest() if trace is not None else "",
        trace=trace.words if trace is not None and trace.keeps else None,
    )
