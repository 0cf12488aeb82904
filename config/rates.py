"""A rate as written: ``"10/s"``, ``"600/m"``, ``"5/h"``, and its burst. One parser for
``@rate_limit`` (tasks/flow), a bucket file's ``rate_limit`` (config/bucket_rates.py) and
a resequencer destination's ``rate=`` (config/destinations.py)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from config.errors import InvalidRateLimit

#: Seconds per unit a rate may be written in.
UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
         "h": 3600.0, "hour": 3600.0}
RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*")
#: The most jobs one key may start at once (a larger burst is no limit at all).
MAX_BURST = 100_000
#: The longest wait between two starts a rate may ask for: ten years, as the longest
#: ``every`` of a recurring message (a slower rate is a typo, and its next slot would
#: overflow a date).
MAX_INTERVAL_S = 10 * 365 * 86400.0


@dataclass(frozen=True)
class Rate:
    """``count`` jobs per ``per`` seconds, at most ``burst`` starting at once."""

    count: float
    per: float
    burst: int

    @property
    def interval_ms(self) -> float:
        """Milliseconds between two starts at the steady rate (GCRA's emission interval)."""
        return self.per * 1000.0 / self.count

    @property
    def per_second(self) -> float:
        return self.count / self.per

    def __str__(self) -> str:
        unit = {1.0: "s", 60.0: "m", 3600.0: "h"}[self.per]
        return f"{self.count:g}/{unit} (burst {self.burst})"


def parse_rate(text: object, burst: object = None) -> Rate:
    """``"10/s"`` and a burst (None: 1, jobs spaced evenly) as a :class:`Rate`;
    :class:`InvalidRateLimit` naming what is wrong."""
    if not isinstance(text, str):
        raise InvalidRateLimit(f"rate must be a string like '10/s', '600/m' or '5/h', "
                             f"got {text!r:.40}")
    found = RATE.fullmatch(text.lower())
    if found is None or found.group(2) not in UNITS:
        raise InvalidRateLimit(f"rate {text!r:.40} is not '<count>/<unit>' with unit s, m or h "
                             f"(e.g. '10/s', '600/m', '5/h')")
    count = float(found.group(1))
    if not math.isfinite(count) or count <= 0:
        raise InvalidRateLimit(f"rate {text!r:.40}: the count must be above 0")
    if UNITS[found.group(2)] / count > MAX_INTERVAL_S:
        raise InvalidRateLimit(f"rate {text!r:.40} is slower than one start in ten years")
    return Rate(count, UNITS[found.group(2)], check_burst(burst))


def check_burst(burst: object) -> int:
    """A burst: None is 1 (evenly spaced), else a whole number 1 to MAX_BURST."""
    if burst is None:
        return 1
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        raise InvalidRateLimit(f"burst must be a whole number from 1 to {MAX_BURST}, "
                             f"got {burst!r:.40}")
    return burst
