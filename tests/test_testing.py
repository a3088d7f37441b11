"""meshnb.testing: the vectors ship with the package and stand beside the code they check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from meshnb import testing

# The spec's own vectors: the shared folder beside the clone, or where MESHNB_SHARED says (CI sets
# it, so there the test must run: a missing file is a failure, not a skip).
SHARED = Path(os.environ.get("MESHNB_SHARED") or Path(__file__).resolve().parents[2] / "shared") / "vectors.json"


def test_vectors_load_as_a_fresh_dict_each_call():
    a = testing.vectors()
    a["runs"].clear()
    assert testing.vectors()["runs"], "a caller's edit must not leak into the next call"
    assert {"one_system_steps_0_to_7", "runs"} <= set(testing.vectors())


@pytest.mark.skipif(
    not SHARED.is_file() and not os.environ.get("MESHNB_SHARED"), reason="no ../shared beside this clone"
)
def test_the_packaged_vectors_are_the_specs():
    assert testing.vectors() == json.loads(SHARED.read_text())
