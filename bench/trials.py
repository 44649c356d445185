"""The median of a figure's trials: the trial whose figure is the median is
reported whole (its figures stay from one measurement), every trial's figure is
kept under "trials", and a wrong count in any trial fails it."""

from __future__ import annotations


def median_of(values: list[dict], key: tuple[str, ...]) -> dict:
    """key: the path to the figure in each trial, e.g. ("rate",)."""
    def metric(v):
        for k in key:
            v = v.get(k) if isinstance(v, dict) else None
        return v
    ranked = sorted((v for v in values if metric(v) is not None), key=metric)
    chosen = dict(ranked[(len(ranked) - 1) // 2] if ranked else values[0])
    chosen["ok"] = all(v.get("ok", True) for v in values)
    if len(values) > 1:
        chosen["trials"] = [metric(v) for v in values]
    return chosen
