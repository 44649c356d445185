"""The mutation check's list: each rule-breaking edit, where it applies, the
tests that must catch it and why it matters. tests/mutation.py runs them; add
an edit here whenever a bug is fixed (the edit that brings the bug back)."""

from mutation_edit import Edit
from mutation_edits_queue import QUEUE_EDITS
from mutation_edits_http import HTTP_EDITS
from mutation_edits_integration import INTEGRATION_EDITS
from mutation_edits_operations import OPERATIONS_EDITS
from mutation_edits_passes import PASS_EDITS
from mutation_edits_plans import PLAN_EDITS
from mutation_edits_producer import PRODUCER_EDITS
from mutation_edits_service import SERVICE_EDITS

__all__ = ["EDITS", "Edit"]

EDITS: list[Edit] = (QUEUE_EDITS + SERVICE_EDITS + PLAN_EDITS + PASS_EDITS + PRODUCER_EDITS + HTTP_EDITS
                     + OPERATIONS_EDITS + INTEGRATION_EDITS)
