"""recur's configuration: settings from the environment and the bucket table."""

from config.buckets import Bucket, BucketTable
from config.buckets_in_use import bucket_table
from config.settings import Settings, load_settings, settings

__all__ = [
    "Bucket",
    "BucketTable",
    "Settings",
    "bucket_table",
    "load_settings",
    "settings",
]
