"""``make bench``: recalld's speed and quality benchmarks (see ``bench/run.py``)."""
