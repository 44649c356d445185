"""Benchmarks of jobfeed side by side with its Python peers (issue 4): `python -m bench`."""
