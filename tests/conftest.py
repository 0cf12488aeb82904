"""Test-run set-up shared by every test directory.

The RECUR_* variables are set before any test module imports the Celery app,
so the app, and every worker the tests start, use this run's own vhost and
Redis key prefix.
"""

from __future__ import annotations

import os

from tests.support.services import test_environment

os.environ.update(test_environment())

pytest_plugins = ["tests.support.fixtures", "tests.support.store_fixtures",
                  "tests.support.spark_fixtures"]
