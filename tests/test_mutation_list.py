"""The mutation check's edits still apply to the code (fast tier): an edit
whose old text the code no longer holds would be reported STALE only when the
(long) check runs; six had gone stale unseen before this test."""

from __future__ import annotations

from pathlib import Path

from mutation_edits import EDITS

ROOT = Path(__file__).resolve().parent.parent


def test_every_mutation_edit_applies_to_the_code_as_it_is():
    stale = {e.name: e.stale(ROOT) for e in EDITS if e.stale(ROOT)}
    assert stale == {}, "update these edits to the code as it is now (tests/mutation_edits_*.py)"
    assert len({e.name for e in EDITS}) == len(EDITS), "two edits share a name"
