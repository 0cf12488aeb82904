"""``spark-submit spark/seed_job.py --generate 1000000`` (or ``--input PATH``).

The same job as ``recur seed``; spark-submit chooses the master. On a cluster
the executors need recur's packages: install recur on them, or ship a zip of
``config routing scheduler spark tasks`` with ``--py-files``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # spark-submit puts spark/ first on sys.path; the packages live one level up.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from spark.job import main

    sys.exit(main(sys.argv[1:]))
