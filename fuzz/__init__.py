"""Fuzz targets and the atheris harness; the hypothesis tests in tests/fuzz run the same targets."""
