"""troupe benchmarks (not tests): `python -m bench core [--shapes a,b,c,d] [--quick]`.

`core` measures the scheduling core without any API server, driven exactly as
the live loop drives it, next to a plain per-node Python reference of the same
filters and scores (see bench/core.py and bench/reference.py). Results go to
stdout as a table and to bench/out/core.json.
"""
