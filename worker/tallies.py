"""Counters, gauges and histograms for what a worker does per job, cheaper than
prometheus_client's own: a worker updates several per job, and each of those
takes a lock, checks its label values and (histograms) walks the buckets one by
one. These are plain numbers behind a dict look-up, exposed through a collector
in the same registry, so /metrics shows the same names, labels and buckets.

They are updated and read on the event loop's thread only (the runner updates
them; /metrics renders on the same loop), which is why they need no lock. They
are not shared between processes (PROMETHEUS_MULTIPROC_DIR): each worker
process serves its own."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class _Buckets:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # the first bucket whose upper bound is >= amount (Prometheus's "le")
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class _Metric:
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], Any] = {}
        registry.register(self)  # type: ignore[arg-type]  # a collector by duck typing: collect()

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self._children[values] = self._child()
        return child

    def _child(self) -> Any:
        return _Value()


class _Single(_Metric):
    """One number per label set, exposed as `family`."""

    family: type[CounterMetricFamily] | type[GaugeMetricFamily]

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = self.family(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._children.items():
            family.add_metric(values, child.value)
        yield family


class Counter(_Single):
    family = CounterMetricFamily


class Gauge(_Single):
    family = GaugeMetricFamily


class Histogram(_Metric):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], *,
                 buckets: Sequence[float], registry: CollectorRegistry) -> None:
        bounds = tuple(float(b) for b in buckets)
        if bounds[-1] != float("inf"):
            bounds += (float("inf"),)
        self.bounds = bounds
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> _Buckets:
        return _Buckets(self.bounds)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._children.items():
            cumulative, buckets = 0, []
            for bound, count in zip(self.bounds, child.counts):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            family.add_metric(values, buckets, child.sum)
        yield family
