"""meshnb.sweeps.plan: a sweep's inputs checked before any step, one line naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import meshnb
from meshnb.sweeps import describe, init_page, stream, sweep
from meshnb.sweeps.plan import check_fits, result_bytes
from meshnb.view import WORD as W


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"steps": -1}, ValueError, "steps"),
        ({"steps": 1.5}, TypeError, "steps"),
        ({"steps": 10, "lrs": []}, ValueError, "lrs"),
        ({"steps": 10, "lrs": ["a"]}, ValueError, "lrs"),
        ({"steps": 10, "lrs": 0.5}, TypeError, "lrs"),
        ({"steps": 10, "lrs": [1e39]}, ValueError, r"lrs\[0\] = 1e\+39 is beyond float32"),
        ({"steps": 10, "view_in": [b"x" * 100]}, ValueError, "4096"),
        ({"steps": 10, "view_in": []}, ValueError, "view_in is empty"),
        ({"steps": 10, "view_in": np.zeros((0, 4096), np.uint8)}, ValueError, "view_in is empty"),
        ({"steps": 10, "view_in": np.zeros((2, 100), np.uint8)}, ValueError, "view_in must be"),
        ({"steps": 10, "view_in": 5}, TypeError, "view_in is a page"),
        ({"steps": 10, "view_in": [5]}, TypeError, r"view_in\[0\] is not bytes"),
        ({"steps": 10, "lrs": [0.1, 0.2], "step_base": [1, 2, 3]}, ValueError, "one per system"),
        ({"steps": 10, "step_base": -1}, ValueError, "step_base"),
        ({"steps": 10, "step_base": 1.5}, TypeError, "step_base must be an integer"),
        ({"steps": 10, "lrs": [0.1, 0.2], "step_base": [1, 2.5]}, TypeError, "step_base must be an integer"),
        ({"steps": 10, "step_base": (1 << 64) - 5}, ValueError, "wrap"),
        ({"steps": 10, "loss_every": 0}, ValueError, "loss_every"),
        ({"steps": 10, "loss_every": 10**30}, ValueError, "loss_every"),
        ({"steps": 10, "loss_every": 2.0}, TypeError, "loss_every"),
        ({"steps": 10, "threads": 0}, ValueError, "threads"),
        ({"steps": 10, "z": None}, TypeError, "z must be True or False"),
        ({"steps": 10, "trace": "yes"}, TypeError, "trace must be True or False"),
    ],
)
def test_bad_arguments_one_line_naming_them(kwargs: dict, error: type, message: str) -> None:
    for run in (sweep, lambda **kw: next(stream(**kw))):
        with pytest.raises(error, match=message) as e:
            run(**kwargs)
        assert "\n" not in str(e.value)


def test_a_page_with_no_steps_per_task_is_refused() -> None:
    page = bytearray(init_page())
    page[20:24] = b"\0\0\0\0"
    with pytest.raises(ValueError, match="STEPS_PER_TASK"):
        sweep(10, view_in=[bytes(page)])
    with pytest.raises(ValueError, match="STEPS_PER_TASK"):
        meshnb.train(10, view_in=bytes(page))  # as train refuses it


def test_a_plan_holds_its_inputs_not_a_page_per_system() -> None:
    lrs = np.geomspace(1e-4, 1, 10**6).astype(np.float32)
    systems = describe(64, lrs=lrs, view_in=[init_page(), init_page()], step_base=7)
    assert len(systems) == 2 * 10**6 and systems.starts.shape == (2, 1024)
    w = systems.words(10**6 - 1, 10**6 + 1)  # the last system of page 0, the first of page 1
    assert list(systems.page_index(10**6 - 1, 10**6 + 1)) == [0, 1]
    assert list(w[:, W["LR"]].view(np.float32)) == [lrs[-1], lrs[0]]  # normal LRs: unchanged by the flush
    assert list(systems.step_base(0, 2)) == [7, 7]


def test_memory_estimates() -> None:
    assert result_bytes(10, 64, trace=False, loss_every=None, keep_pages=False) == 10 * 64
    assert result_bytes(10, 64, trace=True, loss_every=8, keep_pages=True) == 10 * (64 + 32 + 32 + 4096)
    check_fits(1 << 20, "x", "y")
    with pytest.raises(ValueError, match=r"^z needs about 1.0 EiB, more than this machine has free \(.* GiB\); less$"):
        check_fits(1 << 60, "z", "less")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"pages": 5}, TypeError, "view_in is a page"),
        ({"pages": np.zeros((0, 4096), np.uint8)}, ValueError, "view_in is empty"),
        ({"step_bases": 1.5}, TypeError, "step_base must be an integer"),
    ],
)
def test_the_old_names_are_checked_alike(kwargs: dict, error: type, message: str) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(error, match=message):
        sweep(10, **kwargs)


def test_the_command_lines_lrs_and_option_table() -> None:
    from meshnb.runspec import OptionError
    from meshnb.sweeps.plan import parse_lr_range, parse_lrs, sweep_option_fields

    assert [hex(w) for w in parse_lrs("0.5,0x3c23d70a")] == ["0x3f000000", "0x3c23d70a"]
    assert len(parse_lrs("0:1:5")()) == 5
    with pytest.raises(OptionError, match=r"LR = 'fast' is neither a number \(0.01\) nor an f32 word in hex"):
        parse_lrs("0.5,fast")
    rows = {name: (default, flag.flag) for name, default, flag in sweep_option_fields()}
    assert (rows["steps"], rows["lrs"][1], rows["view_in"][1]) == ((4096, "--steps"), "--lr", "--view-in")
    words = parse_lr_range("1e-3:1:4:log")()  # checked when parsed, made when called
    assert words.tobytes() == np.geomspace(1e-3, 1, 4).astype(np.float32).tobytes()
    assert [hex(w) for w in words[:2]] == ["0x3a83126f", "0x3c23d70a"]


def test_lr_values_are_linspace_and_geomspace_in_float32() -> None:
    from meshnb.sweeps.plan import lr_values

    assert lr_values(0.0, 1.0, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert (lr_values(1e-4, 2, 1000, log=True) == np.geomspace(1e-4, 2, 1000).astype(np.float32)).all()
