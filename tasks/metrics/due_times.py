"""``recur_jobs_due_histogram``: per bucket, the scheduled rows due in each of the next
minutes (``scheduler/store/due_histogram.py``), read with the exporter's full count
(its cost is the rows due in the window) and rendered from the snapshot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily

NAME = "recur_jobs_due_histogram"


def histogram_gauge(found: Mapping[str, Sequence[int]]) -> GaugeMetricFamily:
    """The gauge: one sample per bucket and minute ahead (0: due within a minute)."""
    gauge = GaugeMetricFamily(NAME, "Scheduled jobs falling due in each of the next minutes "
                              "(a burst shows as one tall minute; jitter flattens it).",
                              labels=["bucket", "minute"])
    for bucket, counts in sorted(found.items()):
        for minute, count in enumerate(counts):
            gauge.add_metric([bucket, str(minute)], count)
    return gauge
