"""A rate limit as written on a task: the one parser is :mod:`config.rates` (the bucket
file and the resequencer's destinations read rates too); re-exported here."""

from config.rates import MAX_BURST, RATE, UNITS, Rate, check_burst, parse_rate

__all__ = ["MAX_BURST", "RATE", "UNITS", "Rate", "check_burst", "parse_rate"]
