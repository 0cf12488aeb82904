"""The due-jobs store, the drain loop, lease recovery and ``recur status``."""
