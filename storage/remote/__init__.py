"""Tiered storage (docs/tiered-storage.md): segments on an S3-compatible object store."""
