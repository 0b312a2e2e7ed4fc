"""Where the object store is and how to sign requests to it.

`RemoteStoreSettings` is the frozen, validated form of the broker's
`tidelog.remote.storage.*` keys (broker/config.py declares them; docs/retention.md "Tiered topics"
lists them). Credentials come, in this order, from the settings' credentials file
(`tidelog.remote.storage.credentials.file`: an AWS shared-credentials INI file, the
`[default]` profile or the one named, or `key=value` lines), then the environment
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), then boto3's own
chain (instance roles, ~/.aws). Secrets never appear in `repr`.
"""

from __future__ import annotations

import configparser
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from protocol.errors import InvalidConfig

__all__ = ["DEFAULT_PREFIX", "Credentials", "RemoteStoreSettings", "load_credentials"]

DEFAULT_PREFIX = "tidelog"
DEFAULT_REGION = "us-east-1"
# S3's rules for bucket names (3-63 lowercase letters, digits, dots, hyphens).
BUCKET_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")


@dataclass(frozen=True, slots=True)
class Credentials:
    """A static key pair (and session token); the secret is hidden from repr."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(default="", repr=False)


def _read_credentials_file(path: Path, profile: str) -> Credentials:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidConfig(f"credentials file {path}: {exc.strerror or exc}") from exc
    values: Mapping[str, str]
    if text.lstrip().startswith("["):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text, source=str(path))
        except configparser.Error as exc:
            raise InvalidConfig(f"credentials file {path}: {exc}") from exc
        if profile not in parser:
            raise InvalidConfig(f"credentials file {path}: no [{profile}] profile")
        values = parser[profile]
    else:
        pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
        values = {k.strip().lower(): v.strip() for k, v in pairs if not k.lstrip().startswith("#")}
    key_id = values.get("aws_access_key_id", "")
    secret = values.get("aws_secret_access_key", "")
    if not key_id or not secret:
        raise InvalidConfig(
            f"credentials file {path}: needs aws_access_key_id and aws_secret_access_key"
        )
    return Credentials(key_id, secret, values.get("aws_session_token", ""))


def load_credentials(
    credentials_file: str, environ: Mapping[str, str], profile: str = "default"
) -> Credentials | None:
    """The file's credentials, else `environ`'s, else None (boto3's chain).

    The caller passes the environment (the broker passes `os.environ`): storage reads
    no environment variable itself.
    """
    if credentials_file:
        return _read_credentials_file(Path(credentials_file), profile)
    env = environ
    key_id = env.get("AWS_ACCESS_KEY_ID", "")
    secret = env.get("AWS_SECRET_ACCESS_KEY", "")
    if key_id and secret:
        return Credentials(key_id, secret, env.get("AWS_SESSION_TOKEN", ""))
    return None


@dataclass(frozen=True, slots=True)
class RemoteStoreSettings:
    """An S3-compatible store: endpoint (empty: AWS), bucket, key prefix, region.

    `path_style` addresses `endpoint/bucket/key` instead of `bucket.endpoint/key`, which
    S3-compatible servers on one host (moto, MinIO, Ceph) need. Timeouts are per
    attempt; `max_attempts` counts botocore's own retries of one call (the uploader
    retries a whole upload on top, with its backoff).
    """

    bucket: str
    endpoint: str = ""
    prefix: str = DEFAULT_PREFIX
    region: str = DEFAULT_REGION
    path_style: bool = True
    credentials: Credentials | None = None
    connect_timeout_ms: int = 5000
    read_timeout_ms: int = 30000
    max_attempts: int = 3

    def __post_init__(self) -> None:
        bucket = self.bucket
        if not 3 <= len(bucket) <= 63 or not set(bucket) <= BUCKET_NAME_CHARS:
            raise InvalidConfig(
                f"tidelog.remote.storage.bucket: {bucket!r} is not an S3 bucket name "
                "(3-63 lowercase letters, digits, '.', '-')"
            )
        if self.prefix.startswith("/") or self.prefix.endswith("/"):
            raise InvalidConfig(
                f"tidelog.remote.storage.prefix: {self.prefix!r} must not start or end with '/'"
            )
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise InvalidConfig(
                f"tidelog.remote.storage.endpoint: {self.endpoint!r} is not an http(s) URL"
            )
        if self.max_attempts < 1 or self.connect_timeout_ms < 1 or self.read_timeout_ms < 1:
            raise InvalidConfig("tidelog.remote.storage: timeouts and attempts must be >= 1")
