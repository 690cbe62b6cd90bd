"""Chaos runs on the native production stack: ``python -m tests.chaos`` (tests.chaos.run,
tests.chaos.faults; docs/testing.md, "Chaos")."""
