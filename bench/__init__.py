"""Tidelog's benchmarks: each module prints one JSON document; `run_all` collects them."""
