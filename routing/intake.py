"""The resequencer's producer API at the path docs/resequencer.md has always given
(``from routing.intake import submit, submit_batch``); it lives in routing/reseq/intake.py."""

from __future__ import annotations

from routing.reseq.intake import Accepted, submit, submit_batch

__all__ = ["Accepted", "submit", "submit_batch"]
