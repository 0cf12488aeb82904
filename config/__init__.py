"""recur's configuration: settings from the environment and the bucket table."""

from config.buckets import BUCKETS, BUCKETS_BY_NAME, BUCKETS_BY_QUEUE, Bucket
from config.settings import Settings, load_settings, settings

__all__ = [
    "BUCKETS",
    "BUCKETS_BY_NAME",
    "BUCKETS_BY_QUEUE",
    "Bucket",
    "Settings",
    "load_settings",
    "settings",
]
