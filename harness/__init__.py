"""Test and benchmark harness shared by `bench/` and `interop/`: child servers, ports."""
