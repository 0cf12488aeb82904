"""A producer submits through ``routing.intake`` without importing ``tasks`` first.

routing/ never imports tasks; the intake is handed the resequencer's Celery tasks
when the app is set up, and loads the app module by name the first time a
producer that never imported it submits (as ``celery -A tasks`` does).
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.services import ROOT

PROBE = """
import sys
from routing.intake import submit, submit_batch
from routing.reseq.intake import celery_face
before = "tasks" in sys.modules
face = celery_face()
print(before, face.process.name, face.batch.name, "tasks" in sys.modules)
"""


def test_a_producer_that_never_imported_tasks_gets_the_resequencers_tasks() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "tasks.resequence_process",
                                   "tasks.resequence_batch", "True"]
