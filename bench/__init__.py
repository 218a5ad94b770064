"""Benchmark harness comparing lovia-store with lovia, zett-agent and raw-driver floors.

Run it with ``bench/run.sh`` (makes ``bench/.venv``) or, inside that venv, from the
repository root with ``python -m bench``.
"""
