"""Flow control for message tasks: ``@rate_limit`` (rate_limit.py: a delivery's life;
rates.py: what a limit says; limiter.py + routing/gcra.lua: the Redis side).
docs/flow-control.md says what each guarantees and costs."""

from tasks.flow.limiter import Decision, counters
from tasks.flow.rate_limit import RateSpec, rate_limit
from tasks.flow.rates import Rate, parse_rate

__all__ = ["Decision", "Rate", "RateSpec", "counters", "parse_rate",
           "rate_limit"]
