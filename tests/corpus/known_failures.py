"""Corpus cases expected to fail today, per backend, with the reason (the lead edits this file).

A listed case runs as a strict expected failure: when it starts passing, the test fails with
"XPASS(strict)" so the entry gets removed. A mismatch, crash or hang is never listed here.
"""

from __future__ import annotations

KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "cpu": {},
    "cuda": {},
}
