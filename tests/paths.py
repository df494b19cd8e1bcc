"""Where the suite's fixtures and the repository's files are, spelled once for every tier."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EVENTS = TESTS / "events"
GOLDEN = TESTS / "golden"
TEMPLATES = TESTS / "templates"
