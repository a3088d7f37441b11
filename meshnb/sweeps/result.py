"""A sweep's result (:class:`SweepResult`) and its writers (CSV, JSON, npz), each linear in the systems.

The writers take a sweep's parts as they finish and hold none of them; a file is put in place only
when whole (:class:`meshnb.files.Output`).
"""

from __future__ import annotations

import errno
import io
import json
import os
import tempfile
import warnings
import zipfile
from collections.abc import Sequence
from collections.abc import Sequence as SequenceABC
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import IO, Any, overload

import numpy as np
from numpy.typing import NDArray

from .. import loops
from ..files import Output, WriteError, json_safe, json_text
from ..floatz import flush_words
from ..interrupts import WorkerPool
from ..results import system_json
from ..runspec import is_int, row_digests, write_step_base
from ..view import DIGEST_SPANS, WORD, View
from . import columns
from .zip64 import crc32 as _crc32
from .zip64 import end_records, member_headers, npy_header

CSV_COLUMNS = (
    "system", "page", "lr_word", "lr", "step_base", "steps", "last_loss", "last_loss_word", "a", "b", "c", "d",
    "digest", "trace_digest",
)  # fmt: skip
"""The CSV's columns, a row per system; every float has its f32 word beside it (a NaN's bits have no text)."""

_COLUMNS = (
    ("page_index", "page_index"), ("lr_index", "lr_index"), ("lr_word", "lr_words"), ("step_base", "step_base"),
    ("params_words", "params_words"), ("last_loss_word", "last_loss_words"), ("digest", "digest_bytes"),
    ("trace_digest", "trace_digest_bytes"),
)  # fmt: skip
"""The stored columns (npz, :meth:`SweepResult.tobytes`) after ``system``: (column, field), in order."""
_PER_SYSTEM = (*(name for _, name in _COLUMNS), "loss_history", "final_pages")
"""The fields of :class:`SweepResult` that hold a row per system (sliced and concatenated)."""


def digest_of(words: np.ndarray) -> np.ndarray:
    """SPEC 11's digest of every page of ``[n, 1024]`` words (:func:`meshnb.runspec.row_digests`)."""
    return row_digests(words, DIGEST_SPANS)


def hex_words(words: np.ndarray) -> list[str]:
    """Each uint32 as 8 lowercase hex digits (one ``bytes.hex`` for the whole array)."""
    w = np.ascontiguousarray(words, dtype=">u4").reshape(-1)
    return np.frombuffer(w.tobytes().hex().encode("ascii"), dtype="S8").astype("U8").tolist()


def hex_digests(digests: np.ndarray) -> list[str]:
    """Rows of 32 bytes as 64 hex digits each."""
    d = np.ascontiguousarray(digests, dtype=np.uint8).reshape(-1, 32)
    return np.frombuffer(d.tobytes().hex().encode("ascii"), dtype="S64").astype("U64").tolist()


def _floats(words: np.ndarray) -> list[float]:
    return np.ascontiguousarray(words, dtype=np.uint32).view(np.float32).astype(np.float64).tolist()


@dataclass(eq=False)  # arrays: equality is per field (np.array_equal), not one bool
class SweepResult:
    """Systems of a sweep after its steps (a whole sweep, or a part as :func:`~meshnb.sweeps.stream`
    yields them: systems ``first .. first + len - 1``), each bit-equal to its own ``meshnb.train``.

    ``r[k]`` is system ``k`` as a :class:`SweepSystem`, ``r[i:j]`` a result of its own.

    Parameters
    ----------
    steps, z, page_index, lr_index, lr_words, step_base, params_words, last_loss_words, digest_bytes
        The sweep's steps and float mode, and every system's inputs and outputs (the attributes).
    trace_digest_bytes, loss_history, loss_steps, final_pages, starts
        What a sweep keeps when asked, and its start pages.
    first, seconds, first_call_seconds, shape
        Where this result starts in its sweep, and how the loop ran.

    Examples
    --------
    >>> import meshnb
    >>> r = meshnb.sweep(4096, lrs=[0.5, 0.25])
    >>> len(r), r.steps, r.lr_words.tolist()
    (2, 4096, [1056964608, 1048576000])
    >>> r[0].params_hex == meshnb.train(4096, set_lr={0: 0.5}).params_hex
    True
    >>> r[1:]  # doctest: +ELLIPSIS
    SweepResult(systems 1..1, steps=4096, z=True, seconds=..., shape=...)
    """

    steps: int
    """Steps every system ran."""
    z: bool
    """Float mode Z (False: IEEE float32)."""
    page_index: NDArray[np.int64]
    """``[M]`` int64: which start page each system started from (0: the init page)."""
    lr_index: NDArray[np.int64]
    """``[M]`` int64: which of ``lrs`` each system ran (-1: its page's own LR)."""
    lr_words: NDArray[np.uint32]
    """``[M]`` uint32: each system's LR word as its page holds it (``ftz_from_bits`` in mode Z)."""
    step_base: NDArray[np.uint64]
    """``[M]`` uint64: each system's first step."""
    params_words: NDArray[np.uint32]
    """``[M, 4]`` uint32: the final params' words (a, b, c, d)."""
    last_loss_words: NDArray[np.uint32]
    """``[M]`` uint32: the loss word of each system's last step (the page's, as ``train`` reads it)."""
    digest_bytes: NDArray[np.uint8]
    """``[M, 32]`` uint8: SPEC 11's digest of each final page (SHA-256 of PARAMS then LOSS)."""
    trace_digest_bytes: NDArray[np.uint8] | None = None
    """``[M, 32]`` uint8: each system's trace digest (with ``trace=True``), else None."""
    loss_history: NDArray[np.float32] | None = None
    """``[M, H]`` float32: the loss of the steps ``loss_steps`` (with ``loss_every``), else None."""
    loss_steps: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    """``[H]`` int64: the run steps of ``loss_history``'s columns (``loss_every - 1``, ...)."""
    final_pages: NDArray[np.uint8] | None = None
    """``[M, 4096]`` uint8: the final pages, only with ``keep_pages=True``."""
    starts: NDArray[np.uint32] | None = None
    """``[P, 1024]`` uint32: the sweep's start pages (what :meth:`page` runs again)."""
    first: int = 0
    """The sweep's index of this result's first system."""
    seconds: float = 0.0
    """Wall time of the steps (the loop on every thread)."""
    first_call_seconds: float = 0.0
    """The loop's first call: its compile, or the load from numba's cache."""
    shape: str = ""
    """The loop's shape (lanes per group x groups interleaved)."""

    def __len__(self) -> int:
        return int(self.page_index.shape[0])

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}=True" for name, have in (("trace", self.trace_digest_bytes is not None),
                                                ("keep_pages", self.final_pages is not None)) if have
        )  # fmt: skip
        every = f", loss_every={int(self.loss_steps[0]) + 1}" if self.loss_steps.size else ""
        span = f"systems {self.first}..{self.first + len(self) - 1}" if len(self) else "no systems"
        return (
            f"SweepResult({span}, steps={self.steps}, z={self.z}{extra}{every}, seconds={self.seconds:.3f}, "
            f"shape={self.shape!r})"
        )

    @overload
    def __getitem__(self, k: int) -> SweepSystem: ...

    @overload
    def __getitem__(self, k: slice) -> SweepResult: ...

    def __getitem__(self, k: int | slice) -> SweepSystem | SweepResult:
        """``r[k]``: system ``k`` (a :class:`SweepSystem`); ``r[i:j]``: those systems as a result."""
        if isinstance(k, slice):
            lo, hi, stride = k.indices(len(self))
            if stride != 1:
                raise ValueError("a sweep result is sliced in steps of 1")
            return self.slice(lo, max(lo, hi))
        if not is_int(k):
            raise TypeError(f"a sweep result is indexed by an integer or a slice, not {type(k).__name__}")
        i = int(k) + len(self) if k < 0 else int(k)
        if not 0 <= i < len(self):
            raise IndexError(f"system {k} is not in this result of {len(self)}")
        return SweepSystem(self, i)

    def slice(self, lo: int, hi: int) -> SweepResult:
        """Systems ``lo .. hi-1`` of this result as a result of their own (``r[lo:hi]``).

        Parameters
        ----------
        lo, hi : int
            The systems ``lo .. hi-1``.

        Returns
        -------
        SweepResult

        Examples
        --------
        >>> import meshnb
        >>> part = meshnb.sweep(64, lrs=[0.5, 0.25, 0.125]).slice(1, 3)
        >>> len(part), part.first
        (2, 1)
        """
        if not 0 <= lo <= hi <= len(self):
            raise IndexError(f"systems {lo}..{hi - 1} are not in this result of {len(self)}")
        changes = {name: v[lo:hi] for name in _PER_SYSTEM if (v := getattr(self, name)) is not None}
        return replace(self, first=self.first + lo, **changes)

    @property
    def systems(self) -> SweepSystems:
        """The systems, each a :class:`SweepSystem` (as ``train``'s ``result.systems``); ``len(r)`` counts them."""
        return SweepSystems(self)

    @property
    def params(self) -> NDArray[np.float32]:
        """``[M, 4]`` float32: the final params."""
        return self.params_words.view(np.float32)

    @property
    def lrs(self) -> NDArray[np.float32]:
        """Each system's LR as the steps read it (``ftz_from_bits`` in mode Z)."""
        return (flush_words(self.lr_words) if self.z else self.lr_words).view(np.float32)

    @property
    def last_loss(self) -> NDArray[np.float32]:
        """``[M]`` float32: the loss of each system's last step."""
        return self.last_loss_words.view(np.float32)

    @cached_property
    def digests(self) -> list[str]:
        """Each system's digest in hex."""
        return hex_digests(self.digest_bytes)

    @cached_property
    def trace_digests(self) -> list[str]:
        """Each system's trace digest in hex (empty strings without ``trace=True``)."""
        if self.trace_digest_bytes is None:
            return [""] * len(self)
        return hex_digests(self.trace_digest_bytes)

    @cached_property
    def params_hex(self) -> list[list[str]]:
        """Each system's params as 4 hex words."""
        flat = hex_words(self.params_words)
        return [flat[i : i + 4] for i in range(0, len(flat), 4)]

    @property
    def system_steps_per_second(self) -> float:
        """Systems x steps over the loop's wall time."""
        return self.steps * len(self) / self.seconds if self.seconds > 0 else float("inf")

    def page(self, k: int) -> bytes:
        """System ``k``'s final page: kept (``keep_pages=True``), else made by running it alone in
        ``train``'s loop and checked against its digest.

        Parameters
        ----------
        k : int
            The system (an index of this result).

        Returns
        -------
        bytes

        Examples
        --------
        >>> import meshnb
        >>> meshnb.sweep(64, lrs=[0.5, 0.25]).page(1) == meshnb.train(64, set_lr={0: 0.25}).page
        True
        """
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"page(k): k is a system's index, a whole number; got {type(k).__name__} {k!r}")
        if not 0 <= k < len(self):
            raise IndexError(f"system {k} is not in this result of {len(self)}")
        if self.final_pages is not None:
            return self.final_pages[k].tobytes()
        if self.starts is None:
            raise ValueError("this result holds neither its pages nor its start pages")
        words = self.starts[int(self.page_index[k])].copy()  # the page train starts from (runspec.Run.words)
        words[WORD["LR"]] = self.lr_words[k]  # the final page's word: SET_LR already applied (flushed)
        write_step_base(words[None, :], self.step_base[k : k + 1])
        loops.run_tasks(words, self.steps, np.empty((0, 5), dtype=np.uint32), loops.loop_mode(self.z))
        if digest_of(words[None, :])[0].tobytes() != self.digest_bytes[k].tobytes():
            raise RuntimeError(f"system {k}: its run alone does not give the sweep's digest {self.digests[k]}")
        return words.tobytes()

    def to_records(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """One dict per system: inputs, params (hex words), last loss, digests.

        Parameters
        ----------
        names : sequence of str or None, default None
            The start pages' names: they replace the page index.

        Returns
        -------
        list of dict
            ``system``, ``page``, ``lr_word``, ``lr``, ``step_base``, ``params``, ``last_loss``,
            ``last_loss_word``, ``digest``, ``trace_digest`` of each system.

        Examples
        --------
        >>> import meshnb
        >>> rec = meshnb.sweep(64, lrs=[0.5]).to_records(names=["init"])[0]
        >>> rec["page"], rec["lr_word"], rec["lr"]
        ('init', '3f000000', 0.5)
        """
        pages: list[Any] = self.page_index.tolist()
        if names is not None:
            pages = [names[p] for p in pages]
        cols = zip(
            range(self.first, self.first + len(self)), pages, hex_words(self.lr_words),
            _floats(self.lrs.view(np.uint32)), self.step_base.tolist(), self.params_hex,
            _floats(self.last_loss_words), hex_words(self.last_loss_words), self.digests, self.trace_digests,
        )  # fmt: skip
        keys = (
            "system", "page", "lr_word", "lr", "step_base", "params", "last_loss", "last_loss_word", "digest",
            "trace_digest",
        )  # fmt: skip
        return [dict(zip(keys, row)) for row in cols]

    def history_hex(self) -> list[list[str]]:
        """The loss history as hex words, a row per system (empty rows without it).

        Returns
        -------
        list of list of str
            A row per system, a word per kept step (``loss_steps``).

        Examples
        --------
        >>> import meshnb
        >>> len(meshnb.sweep(64, lrs=[0.5], loss_every=32).history_hex()[0])  # steps 31 and 63
        2
        """
        if self.loss_history is None:
            return [[] for _ in range(len(self))]
        h = self.loss_history.view(np.uint32)
        flat, n = hex_words(h), h.shape[1]
        return [flat[i : i + n] for i in range(0, len(flat), n)] if n else [[] for _ in range(len(self))]

    def to_json(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The JSON document (as ``meshnb sweep --json`` prints it).

        Parameters
        ----------
        names : sequence of str or None, default None
            The start pages' names (:meth:`to_records`).

        Returns
        -------
        dict
            ``steps``, ``mode``, ``systems`` (the records), and with a loss history ``loss_steps`` and
            ``loss_history``; strict JSON: a NaN or infinite loss is a string (:data:`meshnb.files.NON_FINITE`).

        Examples
        --------
        >>> import meshnb
        >>> {k: len(v) if k == "systems" else v for k, v in meshnb.sweep(64, lrs=[0.5, 0.25]).to_json().items()}
        {'steps': 64, 'mode': 'z', 'systems': 2}
        """
        doc: dict[str, Any] = {
            "steps": self.steps,
            "mode": "z" if self.z else "ieee",
            "systems": self.to_records(names),
        }
        if self.loss_history is not None:
            doc["loss_steps"] = self.loss_steps.tolist()
            doc["loss_history"] = self.history_hex()
        return json_safe(doc)

    def csv_lines(self, names: Sequence[str] | None = None) -> str:
        """The CSV rows of these systems (no header: :data:`CSV_COLUMNS`), each ending in a newline;
        floats as their shortest text that reads back to the same bits.

        Parameters
        ----------
        names : sequence of str or None, default None
            The start pages' names (:meth:`to_records`).

        Returns
        -------
        str

        Examples
        --------
        >>> import meshnb
        >>> meshnb.sweep(64, lrs=[0.5]).csv_lines().split(",")[:6]
        ['0', '0', '3f000000', '0.5', '0', '64']
        """
        return b"".join(_csv_chunks(self, names)).decode("utf-8")

    def to_frame(self) -> Any:
        """A pandas DataFrame, a row per system, params as float32 columns (an ImportError without pandas).

        Returns
        -------
        pandas.DataFrame
            :meth:`to_records`' columns, and ``a``, ``b``, ``c``, ``d``.

        Examples
        --------
        >>> import meshnb
        >>> meshnb.sweep(64, lrs=[0.5, 0.25]).to_frame().shape  # doctest: +SKIP
        (2, 13)
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "SweepResult.to_frame needs pandas, which meshnb does not install: pip install pandas"
            ) from None

        frame = pd.DataFrame.from_records(self.to_records())
        for j, name in enumerate("abcd"):
            frame[name] = self.params[:, j]
        return frame

    def columns(self) -> dict[str, np.ndarray]:
        """The result as named arrays (what :meth:`tobytes` and the npz writer store).

        Returns
        -------
        dict of str to numpy.ndarray

        Examples
        --------
        >>> import meshnb
        >>> meshnb.sweep(64, lrs=[0.5, 0.25]).columns()["digest"].shape
        (2, 32)
        """
        cols = {"system": np.arange(self.first, self.first + len(self), dtype=np.int64)}
        cols.update((col, v) for col, name in _COLUMNS if (v := getattr(self, name)) is not None)
        if self.loss_history is not None:
            cols["loss_history_words"] = self.loss_history.view(np.uint32)
        return cols

    def tobytes(self) -> bytes:
        """The result as bytes, what MPI ranks send to rank 0 (:meth:`from_bytes` reads it back).

        Returns
        -------
        bytes
            An ``.npz`` of the columns and the run's scalars (no pickles).

        Examples
        --------
        >>> import meshnb
        >>> r = meshnb.sweep(64, lrs=[0.5, 0.25]); SweepResult.from_bytes(r.tobytes()).digests == r.digests
        True
        """
        buf = io.BytesIO()
        extra = {} if self.final_pages is None else {"final_pages": self.final_pages}
        scalars = ("steps", "z", "first", "loss_steps", "seconds", "first_call_seconds", "shape")
        arrays: dict[str, Any] = {name: getattr(self, name) for name in scalars} | self.columns() | extra
        np.savez(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, starts: np.ndarray | None = None) -> SweepResult:
        """A result from :meth:`tobytes`.

        Parameters
        ----------
        data : bytes
            What :meth:`tobytes` gave.
        starts : numpy.ndarray or None, default None
            The sweep's start pages (for :meth:`page`; they do not travel).

        Returns
        -------
        SweepResult

        Examples
        --------
        >>> import meshnb
        >>> r = meshnb.sweep(64, lrs=[0.5]); SweepResult.from_bytes(r.tobytes(), r.starts).page(0) == r.page(0)
        True
        """
        with np.load(io.BytesIO(data), allow_pickle=False) as f:
            names = set(f.files)
            fields = {name: f[col] for col, name in _COLUMNS if col in names or col != "trace_digest"}
            return cls(
                steps=int(f["steps"]),
                z=bool(f["z"]),
                **fields,
                loss_history=f["loss_history_words"].view(np.float32) if "loss_history_words" in names else None,
                loss_steps=f["loss_steps"],
                final_pages=f["final_pages"] if "final_pages" in names else None,
                starts=starts,
                first=int(f["first"]),
                seconds=float(f["seconds"]),
                first_call_seconds=float(f["first_call_seconds"]),
                shape=str(f["shape"]),
            )

    @classmethod
    def concat(cls, parts: Sequence[SweepResult]) -> SweepResult:
        """The parts' systems in order, as one result (parts of one sweep, same steps).

        Parameters
        ----------
        parts : sequence of SweepResult
            At least one part, in system order.

        Returns
        -------
        SweepResult

        Examples
        --------
        >>> import meshnb
        >>> r = meshnb.sweep(64, lrs=[0.5, 0.25, 0.125]); SweepResult.concat([r[:1], r[1:]]).digests == r.digests
        True
        """
        if not parts:
            raise ValueError("concat needs at least one part")
        first = parts[0]
        changes: dict[str, Any] = {
            name: None if getattr(first, name) is None else np.concatenate([getattr(p, name) for p in parts])
            for name in _PER_SYSTEM
        }
        return replace(
            first,
            seconds=sum(p.seconds for p in parts),
            first_call_seconds=max(p.first_call_seconds for p in parts),
            **changes,
        )


class SweepSystem:
    """System ``k`` of a sweep result: what a cluster's ``result.systems[k]``
    (:class:`~meshnb.results.SystemResult`) answers, plus the sweep's inputs (``lr``, ``lr_word``,
    ``step_base``, ``page_index``).

    Parameters
    ----------
    result : SweepResult
        The result it is a system of.
    k : int
        Its index in ``result``.

    Examples
    --------
    >>> import meshnb
    >>> s = meshnb.sweep(64, lrs=[0.5, 0.25])[1]
    >>> s.system, float(s.lr), s.digest == meshnb.train(64, set_lr={0: 0.25}).digest
    (1, 0.25, True)
    """

    __slots__ = ("_k", "_result")

    def __init__(self, result: SweepResult, k: int) -> None:
        self._result, self._k = result, k

    def __repr__(self) -> str:
        return f"SweepSystem(system={self.system}, lr={float(self.lr)!r}, digest={self.digest[:16]}...)"

    @property
    def system(self) -> int:
        """The system's index in the sweep."""
        return self._result.first + self._k

    @property
    def params(self) -> NDArray[np.float32]:
        """The params ``[a, b, c, d]`` (float32[4])."""
        return self._result.params[self._k].copy()

    @property
    def params_hex(self) -> list[str]:
        """The params as four hex words."""
        return list(self._result.params_hex[self._k])

    @property
    def last_loss(self) -> np.float32:
        """The loss of the last step run."""
        return np.float32(self._result.last_loss[self._k])

    @property
    def digest(self) -> str:
        """SPEC 11's digest (hex)."""
        return self._result.digests[self._k]

    @property
    def trace_digest(self) -> str:
        """The trace digest (hex; empty without ``trace=True``)."""
        return self._result.trace_digests[self._k]

    @property
    def counters(self) -> dict[str, int]:
        """SPEC 8's counters ``inits``, ``steps``, ``timeouts`` (inits and timeouts 0: a system alone)."""
        return {"inits": 0, "steps": int(self._result.steps), "timeouts": 0}

    @property
    def page(self) -> bytes:
        """The final 4096-byte page."""
        return self._result.page(self._k)

    def to_json(self) -> dict[str, Any]:
        """The system as ``meshnb train --json`` prints a member (:func:`meshnb.results.system_json`).

        Returns
        -------
        dict
            ``system``, ``params`` (hex words), ``digest``, ``trace_digest``, ``counters``.

        Examples
        --------
        >>> import meshnb
        >>> s = meshnb.sweep(64, lrs=[0.5], trace=True)[0]
        >>> member = meshnb.train(64, view_in=meshnb.sweeps.init_page(), set_lr={0: 0.5}).systems[0]
        >>> s.to_json() == member.to_json()
        True
        """
        return system_json(self)

    @property
    def view(self) -> View:
        """The final page as a :class:`~meshnb.view.View`."""
        return View.from_bytes(self.page)

    @property
    def loss(self) -> NDArray[np.float32]:
        """The loss ring: the loss of step t at index t mod 256 (float32[256])."""
        return np.asarray(self.view["LOSS"], dtype=np.float32)

    @property
    def lr(self) -> np.float32:
        """The LR as the steps read it."""
        return np.float32(self._result.lrs[self._k])

    @property
    def lr_word(self) -> int:
        """The LR word as the page holds it."""
        return int(self._result.lr_words[self._k])

    @property
    def step_base(self) -> int:
        """The first step."""
        return int(self._result.step_base[self._k])

    @property
    def page_index(self) -> int:
        """Which start page the system started from."""
        return int(self._result.page_index[self._k])


class SweepSystems(SequenceABC[SweepSystem]):
    """A sweep result's systems as a sequence of :class:`SweepSystem` (``result.systems``); equal to no
    count (``r.systems == 2`` is False, and ``int(r.systems)`` the count, each with a DeprecationWarning)."""

    __slots__ = ("_result",)

    def __init__(self, result: SweepResult) -> None:
        self._result = result

    def __len__(self) -> int:
        return len(self._result)

    @overload
    def __getitem__(self, k: int) -> SweepSystem: ...

    @overload
    def __getitem__(self, k: slice) -> SweepSystems: ...

    def __getitem__(self, k: int | slice) -> SweepSystem | SweepSystems:
        if isinstance(k, slice):
            return SweepSystems(self._result[k])
        return self._result[k]

    def __repr__(self) -> str:
        return f"<{len(self)} systems of {self._result!r}>"

    def _as_count(self) -> int:
        warnings.warn(
            "SweepResult.systems is the systems (a sequence, as train's result.systems), not their count: "
            "use len(result)",
            DeprecationWarning,
            stacklevel=3,
        )
        return len(self)

    def __eq__(self, other: object) -> bool:
        if is_int(other):
            self._as_count()
            return False
        return NotImplemented

    __hash__ = object.__hash__  # equal only to itself

    def __index__(self) -> int:
        return self._as_count()

    __int__ = __index__


def _csv_chunks(
    r: SweepResult, names: Sequence[str] | None, threads: int = 1, pool: Executor | None = None
) -> list[memoryview]:
    """The CSV rows of ``r`` as pieces of UTF-8; each name quoted as the csv module does."""
    quote = ('"' + x.replace('"', '""') + '"' if any(c in x for c in ',"\r\n') else x for x in names or ())
    fields = None if names is None else [x.encode("utf-8") for x in quote]
    return columns.csv_chunks(
        r.first, r.page_index, fields, r.lr_words, r.lrs.view(np.uint32), r.step_base, r.steps,
        r.last_loss_words, r.params_words, r.digest_bytes, r.trace_digest_bytes, threads, pool,
    )  # fmt: skip


def _spool(spool: IO[bytes] | None, data: Any, what: str) -> IO[bytes]:
    """``data`` appended to ``spool`` (None: a new unbuffered temporary file); a :class:`WriteError` naming ``what``."""
    new = None
    try:
        if spool is None:
            spool = new = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115 (closed by close or abort)
        spool.write(data)
    except OSError as e:
        if new is not None:
            new.close()
        raise WriteError(what, tempfile.gettempdir(), e) from None
    return spool


class Writer:
    """What the writers share (each a :class:`~meshnb.sweeps.job.PartWriter`): a partial output's note and place."""

    partial_note: tuple[int, int, int, int] | None = None
    """``(systems written, systems planned, steps they ran, steps planned)`` once :meth:`partial` said so."""
    diverted: str | None = None
    """Where a partial output went instead of replacing an existing file (``NAME.partial``), if it did."""

    def partial(self, systems: int, of_systems: int, steps: int, of_steps: int) -> None:
        """Say, before :meth:`close`, that the output is partial (a stopped sweep): the output says so
        (CSV ``# partial: ...``, JSON ``"partial"``, npz ``partial``) and never replaces a file (``NAME.partial``)."""
        self.partial_note = (systems, of_systems, steps, of_steps)

    def _commit(self, out: Output) -> None:
        """Put ``out`` in place: a partial output beside an existing file (``NAME.partial``), not over it."""
        if self.partial_note is not None and out.kind == "atomic" and os.path.lexists(out.path):
            out.path = f"{os.fspath(out.path)}.partial"
            self.diverted = out.path
        out.commit()


class CsvWriter(Writer):
    """The CSV table (:data:`CSV_COLUMNS`), a row per system, written part by part.

    Parameters
    ----------
    path : str
        The file (written whole at :meth:`close`, atomically), or ``"-"``: stdout.
    names : sequence of str or None, default None
        The start pages' names (the ``page`` column; None: their indexes).
    threads : int, default 1
        Threads that format a large part's rows at once (a pool kept until :meth:`close` or :meth:`abort`).

    Examples
    --------
    >>> import meshnb
    >>> path = os.path.join(tempfile.mkdtemp(), "sweep.csv")
    >>> w = CsvWriter(path); w.write(meshnb.sweep(64, lrs=[0.5, 0.25])); w.close(64)
    >>> open(path).readline().rstrip() == ",".join(CSV_COLUMNS)
    True
    """

    def __init__(self, path: str, names: Sequence[str] | None = None, threads: int = 1) -> None:
        if not is_int(threads) or threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        self.out = Output(path, "--csv")
        self.names = names
        self.threads = int(threads)
        self.pool: WorkerPool | None = None  # made at the first part large enough to split
        self.head = (",".join(CSV_COLUMNS) + "\n").encode()  # with the first rows: an error before writes nothing

    def write(self, part: SweepResult) -> None:
        """Add a part's systems (after those written before).

        Parameters
        ----------
        part : SweepResult
            The next part, in system order.

        Examples
        --------
        >>> import meshnb
        >>> r, path = meshnb.sweep(64, lrs=[0.5, 0.25]), os.path.join(tempfile.mkdtemp(), "sweep.csv")
        >>> w = CsvWriter(path); w.write(r[:1]); w.write(r[1:]); w.close(64)
        >>> open(path).read().splitlines()[2].split(",")[:4]
        ['1', '0', '3e800000', '0.25']
        """
        if self.pool is None and self.threads > 1 and len(part) >= 2 * columns.SMALL_ROWS:
            self.pool = WorkerPool(self.threads - 1, thread_name_prefix="meshnb-csv")
        chunks = _csv_chunks(part, self.names, self.threads, self.pool)
        if self.head:
            self.out.write(self.head)
            self.head = b""
        for chunk in chunks:  # the formatter's own buffers, no copy
            self.out.write(chunk)

    def close(self, steps: int) -> None:
        """Finish the output and put it in place (written to a temporary beside it until then).

        Parameters
        ----------
        steps : int
            What every written system ran.

        Examples
        --------
        >>> import meshnb
        >>> path = os.path.join(tempfile.mkdtemp(), "sweep.csv")
        >>> w = CsvWriter(path); w.write(meshnb.sweep(64, lrs=[0.5])); os.path.exists(path)
        False
        >>> w.close(64); os.listdir(os.path.dirname(path))
        ['sweep.csv']
        """
        self._stop_pool()
        self.out.write(self.head)
        if self.partial_note is not None:
            n, m, done, steps_planned = self.partial_note
            self.out.write(
                f"# partial: {n} of {m} systems, {done} of {steps_planned} steps (the sweep was stopped): "
                "not the whole table\n".encode()
            )
        self._commit(self.out)

    def _stop_pool(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None

    def abort(self) -> None:
        """Drop the output: the target stays as it was.

        Examples
        --------
        >>> path = os.path.join(tempfile.mkdtemp(), "out"); CsvWriter(path).abort(); os.path.exists(path)
        False
        """
        self._stop_pool()
        self.out.abort()


class JsonWriter(Writer):
    """The JSON document of :meth:`SweepResult.to_json`, written part by part (the loss history
    spooled to a temporary file until the end).

    Parameters
    ----------
    path : str
        The file (written whole at :meth:`close`, atomically), or ``"-"``: stdout.
    z : bool
        The sweep's float mode (the document's ``mode``).
    names : sequence of str or None, default None
        The start pages' names (:meth:`SweepResult.to_records`).

    Examples
    --------
    >>> import meshnb
    >>> path = os.path.join(tempfile.mkdtemp(), "sweep.json")
    >>> w = JsonWriter(path, z=True); w.write(meshnb.sweep(64, lrs=[0.5, 0.25], loss_every=32)); w.close(64)
    >>> doc = json.load(open(path)); doc["mode"], len(doc["systems"]), doc["loss_steps"]
    ('z', 2, [31, 63])
    """

    def __init__(self, path: str, z: bool, names: Sequence[str] | None = None) -> None:
        self.out = Output(path, "--out" if path != "-" else "--json")
        self.names = names
        self.count = 0
        self.loss_steps: np.ndarray | None = None
        self.spool: IO[bytes] | None = None
        self.head = ('{"mode": "' + ("z" if z else "ieee") + '", "systems": [').encode()  # with the first records

    def write(self, part: SweepResult) -> None:
        """Add a part's systems (after those written before).

        Parameters
        ----------
        part : SweepResult
            The next part, in system order.

        Examples
        --------
        >>> import meshnb
        >>> r, path = meshnb.sweep(64, lrs=[0.5, 0.25]), os.path.join(tempfile.mkdtemp(), "sweep.json")
        >>> w = JsonWriter(path, z=True); w.write(r[:1]); w.write(r[1:]); w.close(64)
        >>> [s["lr"] for s in json.load(open(path))["systems"]]
        [0.5, 0.25]
        """
        if not len(part):
            return
        text = json_text(part.to_records(self.names))[1:-1]
        self.out.write(self.head + ((", " if self.count else "") + text).encode())
        self.head = b""
        if part.loss_history is not None:
            rows = json.dumps(part.history_hex())[1:-1]
            self.spool = _spool(self.spool, ((", " if self.count else "") + rows).encode(),
                                "the loss history's spool in TMPDIR")  # fmt: skip
            self.loss_steps = part.loss_steps
        self.count += len(part)

    def close(self, steps: int) -> None:
        """Finish the output and put it in place.

        Parameters
        ----------
        steps : int
            What every written system ran.

        Examples
        --------
        >>> import meshnb
        >>> path = os.path.join(tempfile.mkdtemp(), "sweep.json")
        >>> w = JsonWriter(path, z=True); w.write(meshnb.sweep(64, lrs=[0.5])); w.close(64)
        >>> json.load(open(path))["steps"]
        64
        """
        tail = self.head.decode() + f'], "steps": {steps}'
        if self.partial_note is not None:
            n, m, done, steps_planned = self.partial_note
            tail += f', "partial": {{"systems": {n}, "of_systems": {m}, "steps": {done}, "of_steps": {steps_planned}}}'
        if self.spool is not None:
            assert self.loss_steps is not None
            tail += f', "loss_steps": {json.dumps(self.loss_steps.tolist())}, "loss_history": ['
            self.out.write(tail.encode())
            self.spool.seek(0)
            while block := self.spool.read(1 << 20):
                self.out.write(block)
            self.spool.close()
            tail = "]"
        self.out.write((tail + "}\n").encode())
        self._commit(self.out)

    def abort(self) -> None:
        """Drop the output: the target stays as it was.

        Examples
        --------
        >>> path = os.path.join(tempfile.mkdtemp(), "out"); JsonWriter(path, z=True).abort(); os.path.exists(path)
        False
        """
        if self.spool is not None:
            self.spool.close()
        self.out.abort()


class NpzWriter(Writer):
    """An ``.npz`` of the result's columns (:meth:`SweepResult.columns`, plus ``steps``, ``mode``,
    ``loss_steps`` and ``page_names``), read back with ``np.load``; memory stays one part's.  Given
    the ``rows`` to come, each column is written in place (:mod:`meshnb.sweeps.zip64`), else spooled
    and zipped by zipfile.

    Parameters
    ----------
    path : str
        The file (written whole at :meth:`close`, atomically).
    names : sequence of str or None, default None
        The start pages' names (stored as ``page_names``).
    rows : int or None, default None
        The systems that will be written, if known.

    Examples
    --------
    >>> import meshnb
    >>> path = os.path.join(tempfile.mkdtemp(), "sweep.npz")
    >>> w = NpzWriter(path); w.write(meshnb.sweep(64, lrs=[0.5, 0.25])); w.close(64)
    >>> with np.load(path) as f:
    ...     str(f["mode"]), f["lr_word"].tolist()
    ('z', [1056964608, 1048576000])
    """

    def __init__(self, path: str, names: Sequence[str] | None = None, rows: int | None = None) -> None:
        self.out = Output(path, "--npz")
        self.names = names
        self.spools: dict[str, tuple[IO[bytes], np.dtype, tuple[int, ...]]] = {}
        self.expected = rows if rows and self.out.kind == "atomic" else None  # a temporary file: offsets
        self.placed: dict[str, _Placed] = {}
        self.end = 0  # where the placed columns end: the small members and the directory follow
        self.unsynced = 0
        self.rows = 0
        self.loss_steps = np.zeros(0, np.int64)
        self.z = True

    def write(self, part: SweepResult) -> None:
        """Add a part's systems (after those written before).

        Parameters
        ----------
        part : SweepResult
            The next part, in system order.

        Examples
        --------
        >>> import meshnb
        >>> r, path = meshnb.sweep(64, lrs=[0.5, 0.25]), os.path.join(tempfile.mkdtemp(), "sweep.npz")
        >>> w = NpzWriter(path); w.write(r[:1]); w.write(r[1:]); w.close(64)
        >>> np.load(path)["digest"].shape
        (2, 32)
        """
        self.z = part.z
        self.loss_steps = part.loss_steps
        cols = {name: np.ascontiguousarray(col) for name, col in part.columns().items()}
        if self.expected is not None and not self.rows:
            self._place(cols)
        if self.placed and (self.rows + len(part) > (self.expected or 0) or cols.keys() != self.placed.keys()):
            self._unplace()  # more rows than told: the spools from here on
        for name, col in cols.items():
            data = col.reshape(-1).view(np.uint8).data  # its bytes, no copy
            if self.placed:
                pl = self.placed[name]
                self._pwrite(data, pl.data_at + self.rows * pl.rowbytes)
                pl.crc = _crc32(data, pl.crc)
                self.unsynced += len(data)
                continue
            spool = self.spools[name][0] if name in self.spools else None
            spool = _spool(spool, data, "the npz's spool in TMPDIR")
            self.spools.setdefault(name, (spool, col.dtype, col.shape[1:]))
        self.rows += len(part)
        if self.unsynced >= 1 << 26:  # to the disk as it goes, not all in close's fsync
            os.fdatasync(self.out.f.fileno())
            self.unsynced = 0

    def _pwrite(self, data: memoryview, at: int) -> None:
        try:
            while data:
                n = os.pwrite(self.out.f.fileno(), data, at)
                data, at = data[n:], at + n
        except OSError as e:
            raise WriteError("--npz", self.out.path, e) from None

    def _place(self, cols: dict[str, np.ndarray]) -> None:
        """Lay the columns out for ``expected`` rows from the file's start: local header, .npy header, rows."""
        at, rows = 0, int(self.expected or 0)
        for name, col in cols.items():
            npy = npy_header(col.dtype, (rows, *col.shape[1:]))
            rowbytes = col.dtype.itemsize * int(np.prod(col.shape[1:], dtype=np.int64))
            head = len(member_headers(name, 0, 0, 0)[0])
            self.placed[name] = _Placed(at, at + head + len(npy), npy, _crc32(npy), rowbytes, col.dtype, col.shape[1:])
            at += head + len(npy) + rowbytes * rows
        self.end = at

    def _unplace(self) -> None:
        """Read the placed columns' rows back into spools and empty the file (zipfile zips them)."""
        fd = self.out.f.fileno()
        assert self.out.tmp is not None  # placed only in a temporary file (kind "atomic")
        try:
            with open(self.out.tmp, "rb", buffering=0) as back:  # the output is open for writing only
                for name, pl in self.placed.items():
                    spool = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close or abort)
                    self.spools[name] = (spool, pl.dtype, pl.tail)
                    at, left = pl.data_at, self.rows * pl.rowbytes
                    while left:
                        block = os.pread(back.fileno(), min(left, 1 << 22), at)
                        if not block:
                            raise OSError(errno.EIO, "the file is shorter than what was written to it")
                        spool.write(block)
                        at, left = at + len(block), left - len(block)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        except OSError as e:
            raise WriteError("--npz", self.out.path, e) from None
        self.placed = {}

    def close(self, steps: int) -> None:
        """Finish the output and put it in place.

        Parameters
        ----------
        steps : int
            What every written system ran.

        Examples
        --------
        >>> import meshnb
        >>> path = os.path.join(tempfile.mkdtemp(), "sweep.npz")
        >>> w = NpzWriter(path); w.write(meshnb.sweep(64, lrs=[0.5])); w.close(64)
        >>> int(np.load(path)["steps"])
        64
        """
        small = {
            "steps": np.array(steps, np.int64),
            "mode": np.array("z" if self.z else "ieee"),
            "loss_steps": self.loss_steps,
            "page_names": np.array(list(self.names) if self.names is not None else [], dtype=str),
        }
        if self.partial_note is not None:
            small["partial"] = np.array(self.partial_note, np.uint64)
        if self.placed and self.rows != self.expected:
            self._unplace()  # fewer rows than told (a Ctrl-C): zipfile zips what was written
        try:
            if self.placed:
                self._close_placed(small)
            else:
                self._close_zipped(small)
        except OSError as e:
            self.out.abort()
            raise WriteError("--npz", self.out.path, e) from None
        self._commit(self.out)

    def _close_zipped(self, small: dict[str, np.ndarray]) -> None:
        """The small members, then each spooled column, zipped by zipfile."""
        with zipfile.ZipFile(self.out.f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, arr in small.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as m:
                    np.lib.format.write_array(m, arr, allow_pickle=False)
            for name, (spool, dtype, tail) in self.spools.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as m:
                    m.write(npy_header(dtype, (self.rows, *tail)))
                    spool.seek(0)
                    while block := spool.read(1 << 20):
                        m.write(block)
                spool.close()

    def _close_placed(self, small: dict[str, np.ndarray]) -> None:
        """Each placed column's local header (its CRC now known), then the small members and the directory."""
        directory = []
        for name, pl in self.placed.items():
            size = len(pl.npy) + self.rows * pl.rowbytes
            local, central = member_headers(name, pl.crc, size, pl.at)
            self._pwrite(memoryview(local + pl.npy), pl.at)
            directory.append(central)
        at = self.end
        os.lseek(self.out.f.fileno(), at, os.SEEK_SET)
        for name, arr in small.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            data = buf.getvalue()
            local, central = member_headers(name, _crc32(data), len(data), at)
            self.out.write(local + data)
            directory.append(central)
            at += len(local) + len(data)
        self.out.write(end_records(directory, at))

    def abort(self) -> None:
        """Drop the output: the target stays as it was.

        Examples
        --------
        >>> path = os.path.join(tempfile.mkdtemp(), "out"); NpzWriter(path).abort(); os.path.exists(path)
        False
        """
        for spool, _, _ in self.spools.values():
            spool.close()
        self.out.abort()


@dataclass
class _Placed:
    """A column of :class:`NpzWriter` written in place: member offset, rows' offset, .npy header, CRC-32 so far."""

    at: int
    data_at: int
    npy: bytes
    crc: int
    rowbytes: int
    dtype: np.dtype
    tail: tuple[int, ...]
