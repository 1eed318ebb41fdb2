"""Benchmark scripts that print figures (`python -m bench.NAME`); run from a checkout, not shipped.
Speed and memory are measured here, never asserted in tests."""
