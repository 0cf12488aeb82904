"""The resequencer's busiest destinations, with a bounded number of labels.

A deployment may have thousands of destinations; a label per destination
would grow Prometheus without bound. At most ``SCAN_LIMIT`` destinations are
read per refresh (one round trip each, in the background), the ``top`` with the most
work waiting (buffered + in flight) are exported by name and the rest are
summed under ``destination="_other"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from routing.resequencer import Resequencer, Status

OTHER = "_other"
SCAN_LIMIT = 5000


@dataclass(frozen=True)
class DestinationFigures:
    destination: str
    buffered: int
    in_flight: int
    sent: int
    skipped: int


def busiest(reseq: Resequencer, top: int) -> tuple[list[DestinationFigures], int]:
    """(the ``top`` busiest destinations plus ``_other``, destinations seen)."""
    names = reseq.destinations()
    statuses = [reseq.status(name) for name in names[:SCAN_LIMIT]]
    statuses.sort(key=lambda s: (-(s.buffered + max(s.in_flight, 0)), s.destination))
    figures = [_figures(s.destination, [s]) for s in statuses[:top]]
    rest = statuses[top:]
    if rest:
        figures.append(_figures(OTHER, rest))
    return figures, len(names)


def _figures(name: str, statuses: list[Status]) -> DestinationFigures:
    return DestinationFigures(name, sum(s.buffered for s in statuses),
                              sum(max(s.in_flight, 0) for s in statuses),
                              sum(s.sent for s in statuses), sum(s.skipped for s in statuses))
