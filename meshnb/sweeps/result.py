"""A sweep's result and its serialisation: records, CSV, JSON and npz, each linear in the systems.

:class:`SweepResult` keeps per system only what a sweep was asked for: its inputs (page, LR word,
step base), params, last loss and digests, the trace digest with ``trace=True``, the loss history
with ``loss_every``, the final pages only with ``keep_pages=True`` (4 KiB a system); a final page is
otherwise made on request by running that one system again (:meth:`SweepResult.page`).

The writers (:class:`CsvWriter`, :class:`JsonWriter`, :class:`NpzWriter`) take a sweep's parts as
they finish (:func:`meshnb.sweeps.stream`) and hold none of them: a sweep of 10^8 systems writes
its table with the memory of one batch.  Files are written to a temporary name beside the target
and renamed into place when whole (an interrupted or failed write leaves the old file).

Formatting is vectorised where it counts (hex words and digests through one ``bytes.hex`` per
column); floats are written as ``repr`` of the float32 value widened to float64, as ``train`` does.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import IO, Any

import numpy as np

from .. import loops
from ..files import Output, WriteError, json_safe, json_text
from ..floatz import flush_words
from ..view import WORD
from .plan import LOSS

CSV_COLUMNS = (
    "system", "page", "lr_word", "lr", "step_base", "steps", "last_loss", "a", "b", "c", "d", "digest", "trace_digest",
)  # fmt: skip
"""The CSV's columns, one row per system."""


def digest_of(words: np.ndarray) -> np.ndarray:
    """SPEC 11's digest of every page of ``[n, 1024]`` words (SHA-256 of PARAMS then LOSS), ``[n, 32]`` uint8."""
    hashed = np.ascontiguousarray(np.concatenate((words[:, :4], words[:, LOSS]), axis=1), dtype="<u4")
    joined = b"".join([hashlib.sha256(row).digest() for row in hashed])
    return np.frombuffer(joined, dtype=np.uint8).reshape(hashed.shape[0], 32).copy()


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
    """Systems of a sweep after its steps: arrays indexed by system (a whole sweep, or one part of
    it as :func:`~meshnb.sweeps.stream` yields them: systems ``first .. first + len - 1``).

    System ``k`` is bit-equal to ``meshnb.train(steps, view_in=start page, set_lr={0: lr word},
    step_base=step_base[k], z=z)``: same params, loss, digest and trace digest."""

    steps: int
    """Steps every system ran."""
    z: bool
    """Float mode Z (False: IEEE float32)."""
    page_index: np.ndarray
    """``[M]`` int64: which start page each system started from (0: the init page)."""
    lr_index: np.ndarray
    """``[M]`` int64: which of ``lrs`` each system ran (-1: its page's own LR)."""
    lr_words: np.ndarray
    """``[M]`` uint32: each system's LR word as its page holds it (``ftz_from_bits`` in mode Z)."""
    step_base: np.ndarray
    """``[M]`` uint64: each system's first step."""
    params_words: np.ndarray
    """``[M, 4]`` uint32: the final params' words (a, b, c, d)."""
    last_loss_words: np.ndarray
    """``[M]`` uint32: the loss word of each system's last step (the page's, as ``train`` reads it)."""
    digest_bytes: np.ndarray
    """``[M, 32]`` uint8: SPEC 11's digest of each final page (SHA-256 of PARAMS then LOSS)."""
    trace_digest_bytes: np.ndarray | None = None
    """``[M, 32]`` uint8: each system's trace digest (with ``trace=True``), else None."""
    loss_history: np.ndarray | None = None
    """``[M, H]`` float32: the loss of the steps ``loss_steps`` (with ``loss_every``), else None."""
    loss_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """``[H]`` int64: the run steps of ``loss_history``'s columns (``loss_every - 1``, ...)."""
    final_pages: np.ndarray | None = None
    """``[M, 4096]`` uint8: the final pages, only with ``keep_pages=True``."""
    starts: np.ndarray | None = None
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

    @property
    def systems(self) -> int:
        """M, the systems in this result."""
        return len(self)

    @property
    def params(self) -> np.ndarray:
        """``[M, 4]`` float32: the final params."""
        return self.params_words.view(np.float32)

    @property
    def lrs(self) -> np.ndarray:
        """Each system's LR as the steps read it (``ftz_from_bits`` in mode Z)."""
        return (flush_words(self.lr_words) if self.z else self.lr_words).view(np.float32)

    @property
    def last_loss(self) -> np.ndarray:
        """``[M]`` float32: the loss of each system's last step."""
        return self.last_loss_words.view(np.float32)

    @cached_property
    def digests(self) -> list[str]:
        """Each system's digest in hex (made once, in linear time)."""
        return hex_digests(self.digest_bytes)

    @cached_property
    def trace_digests(self) -> list[str]:
        """Each system's trace digest in hex (empty strings without ``trace=True``)."""
        if self.trace_digest_bytes is None:
            return [""] * len(self)
        return hex_digests(self.trace_digest_bytes)

    @cached_property
    def params_hex(self) -> list[list[str]]:
        """Each system's params as 4 hex words (made once, in linear time)."""
        flat = hex_words(self.params_words)
        return [flat[i : i + 4] for i in range(0, len(flat), 4)]

    @property
    def system_steps_per_second(self) -> float:
        """Systems x steps over the loop's wall time."""
        return self.steps * len(self) / self.seconds if self.seconds > 0 else float("inf")

    def page(self, k: int) -> bytes:
        """System ``k``'s final page (``k`` indexes this result): kept with ``keep_pages=True``,
        else made by running system ``k`` alone in the single loop (``train``'s) and checked
        against its digest."""
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"page(k): k is a system's index, a whole number; got {type(k).__name__} {k!r}")
        if not 0 <= k < len(self):
            raise IndexError(f"system {k} is not in this result of {len(self)}")
        if self.final_pages is not None:
            return self.final_pages[k].tobytes()
        if self.starts is None:
            raise ValueError("this result holds neither its pages nor its start pages")
        words = self.starts[int(self.page_index[k])].copy()  # the page train starts from (plan.Systems.words)
        words[WORD["LR"]] = self.lr_words[k]
        base = int(self.step_base[k])
        words[WORD["STEP_HI"]], words[WORD["NEXT_STEP"]] = base >> 32, base & 0xFFFFFFFF
        loops.run_tasks(words, self.steps, np.empty((0, 5), dtype=np.uint32), loops.loop_mode(self.z))
        if digest_of(words[None, :])[0].tobytes() != self.digest_bytes[k].tobytes():
            raise RuntimeError(f"system {k}: its run alone does not give the sweep's digest {self.digests[k]}")
        return words.tobytes()

    def to_records(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """One dict per system: inputs, params (hex words), last loss, digests (linear time).
        ``names`` replaces the page index by the page's name."""
        pages: list[Any] = self.page_index.tolist()
        if names is not None:
            pages = [names[p] for p in pages]
        cols = zip(
            range(self.first, self.first + len(self)),
            pages,
            hex_words(self.lr_words),
            _floats(self.lrs.view(np.uint32)),
            self.step_base.tolist(),
            self.params_hex,
            _floats(self.last_loss_words),
            self.digests,
            self.trace_digests,
        )
        keys = ("system", "page", "lr_word", "lr", "step_base", "params", "last_loss", "digest", "trace_digest")
        return [dict(zip(keys, row)) for row in cols]

    def history_hex(self) -> list[list[str]]:
        """The loss history as hex words, a row per system (empty rows without it)."""
        if self.loss_history is None:
            return [[] for _ in range(len(self))]
        h = self.loss_history.view(np.uint32)
        flat, n = hex_words(h), h.shape[1]
        return [flat[i : i + n] for i in range(0, len(flat), n)] if n else [[] for _ in range(len(self))]

    def to_json(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The JSON document: ``{"steps", "mode", "systems": [records], "loss_steps", "loss_history"}``,
        strict JSON (a diverged loss, NaN or infinite, as the string ``"NaN"``, ``"Infinity"``,
        ``"-Infinity"``: :data:`meshnb.files.NON_FINITE`)."""
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
        """The CSV rows of these systems (no header), each ending in a newline."""
        pages = self.page_index.tolist() if names is None else [_csv_field(names[p]) for p in self.page_index.tolist()]
        lr = [repr(x) for x in _floats(self.lrs.view(np.uint32))]
        loss = [repr(x) for x in _floats(self.last_loss_words)]
        p = self.params_hex
        steps = str(self.steps)
        rows = zip(
            range(self.first, self.first + len(self)),
            pages,
            hex_words(self.lr_words),
            lr,
            self.step_base.tolist(),
            loss,
            p,
            self.digests,
            self.trace_digests,
        )
        return "".join(
            f"{k},{pg},{lw},{r},{b},{steps},{ls},{w[0]},{w[1]},{w[2]},{w[3]},{d},{t}\n"
            for k, pg, lw, r, b, ls, w, d, t in rows
        )

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per system, params as float32 columns (ImportError without pandas)."""
        import pandas as pd

        frame = pd.DataFrame.from_records(self.to_records())
        for j, name in enumerate("abcd"):
            frame[name] = self.params[:, j]
        return frame

    def columns(self) -> dict[str, np.ndarray]:
        """The result as named arrays (what :meth:`tobytes` and the npz writer store)."""
        cols = {
            "system": np.arange(self.first, self.first + len(self), dtype=np.int64),
            "page_index": self.page_index,
            "lr_index": self.lr_index,
            "lr_word": self.lr_words,
            "step_base": self.step_base,
            "params_words": self.params_words,
            "last_loss_word": self.last_loss_words,
            "digest": self.digest_bytes,
        }
        if self.trace_digest_bytes is not None:
            cols["trace_digest"] = self.trace_digest_bytes
        if self.loss_history is not None:
            cols["loss_history_words"] = self.loss_history.view(np.uint32)
        return cols

    def tobytes(self) -> bytes:
        """The result as bytes (:meth:`from_bytes` reads it back): what MPI ranks send to rank 0."""
        buf = io.BytesIO()
        extra = {} if self.final_pages is None else {"final_pages": self.final_pages}
        arrays: dict[str, Any] = {
            "steps": self.steps,
            "z": self.z,
            "first": self.first,
            "loss_steps": self.loss_steps,
            "seconds": self.seconds,
            "first_call_seconds": self.first_call_seconds,
            "shape": self.shape,
            **self.columns(),
            **extra,
        }
        np.savez(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, starts: np.ndarray | None = None) -> SweepResult:
        """A result from :meth:`tobytes` (``starts``: the sweep's start pages, for :meth:`page`)."""
        with np.load(io.BytesIO(data), allow_pickle=False) as f:
            names = set(f.files)
            return cls(
                steps=int(f["steps"]),
                z=bool(f["z"]),
                page_index=f["page_index"],
                lr_index=f["lr_index"],
                lr_words=f["lr_word"],
                step_base=f["step_base"],
                params_words=f["params_words"],
                last_loss_words=f["last_loss_word"],
                digest_bytes=f["digest"],
                trace_digest_bytes=f["trace_digest"] if "trace_digest" in names else None,
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
        """The parts' systems in order, as one result (parts of one sweep, same steps)."""
        if not parts:
            raise ValueError("concat needs at least one part")
        first = parts[0]

        def cat(name: str) -> Any:
            values = [getattr(p, name) for p in parts]
            return None if values[0] is None else np.concatenate(values)

        return cls(
            steps=first.steps,
            z=first.z,
            page_index=cat("page_index"),
            lr_index=cat("lr_index"),
            lr_words=cat("lr_words"),
            step_base=cat("step_base"),
            params_words=cat("params_words"),
            last_loss_words=cat("last_loss_words"),
            digest_bytes=cat("digest_bytes"),
            trace_digest_bytes=cat("trace_digest_bytes"),
            loss_history=cat("loss_history"),
            loss_steps=first.loss_steps,
            final_pages=cat("final_pages"),
            starts=first.starts,
            first=first.first,
            seconds=sum(p.seconds for p in parts),
            first_call_seconds=max(p.first_call_seconds for p in parts),
            shape=first.shape,
        )


def _csv_field(text: str) -> str:
    """A CSV field as the csv module writes it (quoted when it holds a comma, quote or line break)."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


# --- writers ----------------------------------------------------------------------------------------


# A byte stream to a file under the one output rule (:class:`meshnb.files.Output`), or to stdout ("-").
_Out = Output


class Writer:
    """Takes a sweep's parts in order (:meth:`write`) and finishes the output (:meth:`close`)."""

    def write(self, part: SweepResult) -> None:
        """Add a part's systems."""
        raise NotImplementedError

    def close(self, steps: int) -> None:
        """Finish the output (``steps``: what every written system ran)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Drop the output (a file's target stays as it was)."""


class CsvWriter(Writer):
    """The CSV table (:data:`CSV_COLUMNS`), a row per system, written part by part."""

    def __init__(self, path: str, names: Sequence[str] | None = None) -> None:
        self.out = _Out(path, "--csv")
        self.names = names
        self.head = (
            ",".join(CSV_COLUMNS) + "\n"
        ).encode()  # written with the first rows: an error before them writes nothing

    def write(self, part: SweepResult) -> None:
        self.out.write(self.head + part.csv_lines(self.names).encode())
        self.head = b""

    def close(self, steps: int) -> None:
        self.out.write(self.head)
        self.out.commit()

    def abort(self) -> None:
        self.out.abort()


class JsonWriter(Writer):
    """The JSON document of :meth:`SweepResult.to_json`, written part by part: the records as they
    come, the loss history spooled to a temporary file and appended at the end."""

    def __init__(self, path: str, z: bool, names: Sequence[str] | None = None) -> None:
        self.out = _Out(path, "--out" if path != "-" else "--json")
        self.names = names
        self.count = 0
        self.loss_steps: np.ndarray | None = None
        self.spool: IO[bytes] | None = None
        self.head = ('{"mode": "' + ("z" if z else "ieee") + '", "systems": [').encode()  # with the first records

    def write(self, part: SweepResult) -> None:
        if not len(part):
            return
        text = json_text(part.to_records(self.names))[1:-1]
        self.out.write(self.head + ((", " if self.count else "") + text).encode())
        self.head = b""
        if part.loss_history is not None:
            if self.spool is None:
                self.spool = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close or abort)
            rows = json.dumps(part.history_hex())[1:-1]
            self.spool.write(((", " if self.count else "") + rows).encode())
            self.loss_steps = part.loss_steps
        self.count += len(part)

    def close(self, steps: int) -> None:
        tail = self.head.decode() + f'], "steps": {steps}'
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
        self.out.commit()

    def abort(self) -> None:
        if self.spool is not None:
            self.spool.close()
        self.out.abort()


class NpzWriter(Writer):
    """An ``.npz`` of the result's columns (:meth:`SweepResult.columns`, plus ``steps``, ``mode``,
    ``loss_steps`` and ``page_names``), read back with ``np.load``.  Each column goes to its own
    temporary file part by part; :meth:`close` streams them into the zip (ZIP64) with their .npy
    headers, so memory stays one part's."""

    def __init__(self, path: str, names: Sequence[str] | None = None) -> None:
        self.out = _Out(path, "--npz")
        self.names = names
        self.spools: dict[str, tuple[IO[bytes], np.dtype, tuple[int, ...]]] = {}
        self.rows = 0
        self.loss_steps = np.zeros(0, np.int64)
        self.z = True

    def write(self, part: SweepResult) -> None:
        self.z = part.z
        self.loss_steps = part.loss_steps
        for name, col in part.columns().items():
            col = np.ascontiguousarray(col)
            if name not in self.spools:
                spool = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close or abort)
                self.spools[name] = (spool, col.dtype, col.shape[1:])
            self.spools[name][0].write(col.tobytes())
        self.rows += len(part)

    def close(self, steps: int) -> None:
        try:
            with zipfile.ZipFile(self.out.f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
                small = {
                    "steps": np.array(steps, np.int64),
                    "mode": np.array("z" if self.z else "ieee"),
                    "loss_steps": self.loss_steps,
                    "page_names": np.array(list(self.names) if self.names is not None else [], dtype=str),
                }
                for name, arr in small.items():
                    with zf.open(f"{name}.npy", "w", force_zip64=True) as m:
                        np.lib.format.write_array(m, arr, allow_pickle=False)
                for name, (spool, dtype, tail) in self.spools.items():
                    with zf.open(f"{name}.npy", "w", force_zip64=True) as m:
                        header: dict[str, Any] = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
                        header["shape"] = (self.rows, *tail)
                        np.lib.format.write_array_header_2_0(m, header)
                        spool.seek(0)
                        while block := spool.read(1 << 20):
                            m.write(block)
                    spool.close()
        except OSError as e:
            self.out.abort()
            raise WriteError("--npz", self.out.path, e) from None
        self.out.commit()

    def abort(self) -> None:
        for spool, _, _ in self.spools.values():
            spool.close()
        self.out.abort()
