"""The resumable SHA-256 against hashlib, across saved and restored states."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshnb.sha256 import Sha256, Sha256State


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=6))
def test_sha256_matches_hashlib_across_saved_states(data, cuts):
    h = Sha256()
    at = 0
    for cut in sorted(c for c in cuts if c <= len(data)) + [len(data)]:
        h.update(data[at:cut])
        h = Sha256(h.state())  # as a resumed run would
        at = cut
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_sha256_state_is_checked():
    with pytest.raises(ValueError, match="8 u32 words"):
        Sha256State((1, 2), 0, b"")
    with pytest.raises(ValueError, match="tail bytes"):
        Sha256State((0,) * 8, 70, b"")
