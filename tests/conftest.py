"""Shared fixtures. Tier markers (core, ray, cluster, chaos, spark) are set per
module with `pytestmark`; `pytest -m core` runs the fast tier alone."""
