"""The resequencer's busiest destinations, with a bounded number of labels.

A deployment may have thousands of destinations; a label per destination
would grow Prometheus without bound. At most ``SCAN_LIMIT`` destinations are
read per refresh (one round trip each, in the background); those in outage come
first, then those with the most work waiting (buffered + in flight): the
``top`` of them are exported by name and the rest are summed under
``destination="_other"`` (its ``outage`` counts the rest that are in outage).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from routing.reseq.state import Resequencer, Status

OTHER = "_other"
SCAN_LIMIT = 5000


@dataclass(frozen=True)
class DestinationFigures:
    destination: str
    buffered: int
    in_flight: int
    sent: int
    skipped: int
    dead_lettered: int = 0
    #: 1 while the destination is in outage (for ``_other``: how many of the rest are).
    outage: int = 0
    #: Tries refused or held back, by status ("401": 12).
    refused: dict[str, int] = field(default_factory=dict)
    #: Sends that waited for their slot under the destination's rate.
    rate_waits: int = 0


def busiest(reseq: Resequencer, top: int) -> tuple[list[DestinationFigures], int]:
    """(the ``top`` busiest destinations plus ``_other``, destinations seen)."""
    names = reseq.destinations()
    statuses = [reseq.status(name) for name in names[:SCAN_LIMIT]]
    statuses.sort(key=lambda s: (s.outage is None, -(s.buffered + max(s.in_flight, 0)),
                                 s.destination))
    figures = [_figures(s.destination, [s]) for s in statuses[:top]]
    rest = statuses[top:]
    if rest:
        figures.append(_figures(OTHER, rest))
    return figures, len(names)


def _figures(name: str, statuses: list[Status]) -> DestinationFigures:
    refused: Counter[str] = Counter()
    for s in statuses:
        refused.update(s.refused)
    return DestinationFigures(name, sum(s.buffered for s in statuses),
                              sum(max(s.in_flight, 0) for s in statuses),
                              sum(s.sent for s in statuses), sum(s.skipped for s in statuses),
                              sum(s.dead_lettered for s in statuses),
                              sum(s.outage is not None for s in statuses), dict(refused),
                              sum(s.rate_waits for s in statuses))
