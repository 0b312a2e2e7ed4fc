"""Tiered storage's store side (issue 39, docs/retention.md "Tiered topics").

- `object_store`: the S3 client (boto3), blocking and async (`ObjectStore`);
- `keys`: the object key layout in the bucket;
- `manifest`: the per-partition manifest of remote segments and their KIP-405 states;
- `settings`: where the store is and the credentials;
- `errors`: `RemoteStorageError` with its kind and `retriable`.
"""

from storage.remote.errors import RemoteErrorKind, RemoteStorageError
from storage.remote.keys import (
    MANIFEST_OBJECT,
    SEGMENT_OBJECT_SUFFIXES,
    TXN_INDEX_SUFFIX,
    SegmentObjectKey,
    manifest_key,
    new_segment_id,
    parse_segment_key,
    partition_prefix,
    segment_key,
    segment_keys,
)
from storage.remote.manifest import (
    MANIFEST_VERSION,
    Manifest,
    ManifestFormatError,
    RemoteSegment,
    SegmentState,
    manifest_path,
    read_manifest,
    write_manifest,
)
from storage.remote.object_store import BlockingObjectStore, ObjectInfo, ObjectStore, RunSync
from storage.remote.settings import Credentials, RemoteStoreSettings, load_credentials

__all__ = [
    "MANIFEST_OBJECT",
    "MANIFEST_VERSION",
    "SEGMENT_OBJECT_SUFFIXES",
    "TXN_INDEX_SUFFIX",
    "BlockingObjectStore",
    "Credentials",
    "Manifest",
    "ManifestFormatError",
    "ObjectInfo",
    "ObjectStore",
    "RemoteErrorKind",
    "RemoteSegment",
    "RemoteStorageError",
    "RemoteStoreSettings",
    "RunSync",
    "SegmentObjectKey",
    "SegmentState",
    "load_credentials",
    "manifest_key",
    "manifest_path",
    "new_segment_id",
    "parse_segment_key",
    "partition_prefix",
    "read_manifest",
    "segment_key",
    "segment_keys",
    "write_manifest",
]
