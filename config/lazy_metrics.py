"""Module-level Prometheus metrics that cost nothing until first used.

A default deployment exports no metrics (RECUR_METRICS_PORT=0), yet a worker imports
every module that counts something: with plain ``Counter(...)`` definitions each of
them would load prometheus_client (~2 MB a process) and build its objects for nothing.
A :class:`LazyMetric` is declared at module level the same way, and imports
prometheus_client and creates its metric (registered in the default ``REGISTRY``, or
in PROMETHEUS_MULTIPROC_DIR's files) on its first use: ``labels``, ``inc`` or any
other attribute of the metric. :func:`create_all` creates every one declared so far,
so a /metrics endpoint lists them all from its first scrape (tasks/metrics/serve.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram
    from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound="MetricWrapperBase")

_declared: list[LazyMetric[Any]] = []
_lock = threading.Lock()


class LazyMetric(Generic[M]):
    """A prometheus_client metric (``kind``: Counter, Gauge, Histogram) made on first use."""

    def __init__(self, kind: str, name: str, documentation: str,
                 labelnames: Sequence[str] = (), **options: Any) -> None:
        self._kind, self._name, self._documentation = kind, name, documentation
        self._labelnames, self._options = tuple(labelnames), options
        self._metric: M | None = None
        with _lock:
            _declared.append(self)

    @property
    def created(self) -> bool:
        """Whether the metric exists yet (prometheus_client imported for it)."""
        return self._metric is not None

    def get(self) -> M:
        """The metric, created (once, in any thread) on the first call."""
        metric = self._metric
        if metric is None:
            with _lock:
                if self._metric is None:
                    import prometheus_client

                    factory = getattr(prometheus_client, self._kind)
                    self._metric = cast(M, factory(self._name, self._documentation,
                                                   self._labelnames, **self._options))
                metric = self._metric
        return metric

    def labels(self, *values: object) -> M:
        """The child metric of these label values."""
        return self.get().labels(*values)

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (a metric without labels)."""
        cast(Any, self.get()).inc(amount)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.get(), attr)


def counter(name: str, documentation: str, labelnames: Sequence[str] = ()
            ) -> LazyMetric[Counter]:
    """A lazy ``prometheus_client.Counter``."""
    return LazyMetric("Counter", name, documentation, labelnames)


def gauge(name: str, documentation: str, labelnames: Sequence[str] = ()) -> LazyMetric[Gauge]:
    """A lazy ``prometheus_client.Gauge``."""
    return LazyMetric("Gauge", name, documentation, labelnames)


def histogram(name: str, documentation: str, labelnames: Sequence[str] = (),
              buckets: Sequence[float] | None = None) -> LazyMetric[Histogram]:
    """A lazy ``prometheus_client.Histogram`` (default buckets unless ``buckets``)."""
    options: dict[str, Any] = {} if buckets is None else {"buckets": tuple(buckets)}
    return LazyMetric("Histogram", name, documentation, labelnames, **options)


def create_all() -> int:
    """Create every metric declared so far; how many there are."""
    with _lock:
        declared = list(_declared)
    for metric in declared:
        metric.get()
    return len(declared)
