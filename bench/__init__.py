"""droidwire benchmarks: every figure is a ratio against a baseline measured in the same run.

Each ``bench/bench_*.py`` module exposes ``run(quick: bool) -> list[Figure]``; ``python -m bench``
runs them all (or those named on the command line) and prints one JSON line per figure plus a
readable table. Benchmarks never assert on time.
"""
