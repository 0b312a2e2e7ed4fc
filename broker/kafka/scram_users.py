"""Kafka's SCRAM user APIs: DescribeUserScramCredentials, AlterUserScramCredentials.

What `kafka-configs --entity-type users --describe/--alter --add-config
'SCRAM-SHA-256=[password=...]'` and an admin client's `describeUserScramCredentials`/
`alterUserScramCredentials` call, on the broker's own SCRAM users (the data
directory's credential store, broker/security/credentials.py, which `tidelog users`
edits too). Answered as Kafka 4.4's KRaft broker answers (its `ScramImage.describe`
and `ScramControlManager.alterCredentials`), codes and messages:

- Describe (Describe on the cluster): every user, or those named; a name twice is
  DUPLICATE_RESOURCE, a user with no credential RESOURCE_NOT_FOUND.
- Alter (Alter on the cluster): one change per user per request (a second is
  DUPLICATE_RESOURCE for that user); an unknown mechanism UNSUPPORTED_SASL_MECHANISM;
  an empty name, or too few or too many iterations, UNACCEPTABLE_CREDENTIAL; deleting
  what does not exist RESOURCE_NOT_FOUND. The client sends the salted password; the
  broker keeps only SCRAM's StoredKey and ServerKey derived from it, as Kafka does.
  Tidelog's usernames are also principals in ACLs and logs, so a name outside its
  username rule is UNACCEPTABLE_CREDENTIAL too (Kafka accepts any non-empty name).
"""

from __future__ import annotations

from typing import Any

import trio

from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.security.acl import Operation, ResourceType
from broker.security.credentials import USERNAME_RE, CredentialStore
from broker.security.requires import Requires, Right
from protocol.kafka.errors import KafkaError
from protocol.kafka.messages import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from protocol.sasl.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
)

# Kafka's ScramMechanism types on the wire (0 is UNKNOWN).
MECHANISM_TYPES: dict[int, ScramMechanism] = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}
_TYPE_OF = {m.name: t for t, m in MECHANISM_TYPES.items()}

_DESCRIBE_CLUSTER = Right(Operation.DESCRIBE, ResourceType.CLUSTER)
_ALTER_CLUSTER = Right(Operation.ALTER, ResourceType.CLUSTER)

# Kafka's messages (ScramImage, ScramControlManager).
DESCRIBE_DUPLICATE = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "
ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DELETE_MISSING = "Attempt to delete a user credential that does not exist"


class _Refused(Exception):
    def __init__(self, error: KafkaError, message: str) -> None:
        super().__init__(message)
        self.error, self.message = error, message


def _store(call: KafkaCall) -> CredentialStore | None:
    security = call.ctx.security
    return security.credentials if security is not None else None


# --- DescribeUserScramCredentials -----------------------------------------------------


def _user_result(user: str, error: KafkaError, message: str | None) -> dict[str, Any]:
    return {
        "user": user,
        "error_code": error.code,
        "error_message": message,
        "credential_infos": [],
    }


async def describe_user_scram_credentials(call: KafkaCall) -> KafkaAnswer:
    """DescribeUserScramCredentials v0: the mechanisms and iterations of each user."""
    store = _store(call)
    entries = store.entries() if store is not None else {}
    asked = call.body["users"]
    names: dict[str, bool] = {}  # name -> asked for twice
    if not asked:
        names = dict.fromkeys(entries, False)
    else:
        for user in asked:
            names[user["name"]] = user["name"] in names
    results = []
    for name, twice in names.items():
        if twice:
            results.append(
                _user_result(name, KafkaError.DUPLICATE_RESOURCE, DESCRIBE_DUPLICATE + name)
            )
        elif not entries.get(name):
            results.append(
                _user_result(name, KafkaError.RESOURCE_NOT_FOUND, DESCRIBE_MISSING + name)
            )
        else:
            result = _user_result(name, KafkaError.NONE, None)
            result["credential_infos"] = [
                {"mechanism": _TYPE_OF[mech], "iterations": cred.iterations}
                for mech, cred in sorted(entries[name].items(), key=lambda e: _TYPE_OF[e[0]])
            ]
            results.append(result)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


def _described_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's `DescribeUserScramCredentialsRequest.getErrorResponse`: the error on the
    request and on one result per user named, whose name Kafka leaves empty.
    (librdkafka 2.x crashes on any request-level error here, Kafka's too.)"""
    users = call.body["users"] or []
    return {
        "throttle_time_ms": 0,
        "error_code": error.code,
        "error_message": message,
        "results": [_user_result("", error, message) for _ in users],
    }


# --- AlterUserScramCredentials --------------------------------------------------------


def _mechanism(name: str, mechanism_type: int) -> ScramMechanism:
    """Kafka's `validateScramUsernameAndMechanism` (and Tidelog's username rule)."""
    if not name:
        raise _Refused(KafkaError.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    mechanism = MECHANISM_TYPES.get(mechanism_type)
    if mechanism is None:
        raise _Refused(KafkaError.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if not USERNAME_RE.fullmatch(name):
        raise _Refused(
            KafkaError.UNACCEPTABLE_CREDENTIAL,
            "Tidelog usernames are 1-255 of A-Z a-z 0-9 . _ @ -",
        )
    return mechanism


def _credential(upsertion: dict[str, Any], mechanism: ScramMechanism) -> ScramCredential:
    """The stored form of a client-salted password (RFC 5802's StoredKey, ServerKey)."""
    iterations = upsertion["iterations"]
    if iterations < ITERATIONS_MIN:
        raise _Refused(KafkaError.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if iterations > ITERATIONS_MAX:
        raise _Refused(KafkaError.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    salted = upsertion["salted_password"]
    return ScramCredential(
        salt=upsertion["salt"],
        iterations=iterations,
        stored_key=mechanism.h(mechanism.hmac(salted, b"Client Key")),
        server_key=mechanism.hmac(salted, b"Server Key"),
    )


def _plan(
    body: dict[str, Any], existing: dict[str, dict[str, ScramCredential]]
) -> tuple[dict[tuple[str, str], ScramCredential | None], dict[str, tuple[KafkaError, str]]]:
    """Kafka's order: deletions, then upsertions, one change per user."""
    changes: dict[str, tuple[str, ScramCredential | None]] = {}
    errors: dict[str, tuple[KafkaError, str]] = {}
    for op, upsert in [(d, False) for d in body["deletions"]] + [
        (u, True) for u in body["upsertions"]
    ]:
        name = op["name"]
        if name in errors:
            continue
        if changes.pop(name, None) is not None:
            errors[name] = (KafkaError.DUPLICATE_RESOURCE, ALTERED_TWICE)
            continue
        try:
            mechanism = _mechanism(name, op["mechanism"])
            if upsert:
                changes[name] = (mechanism.name, _credential(op, mechanism))
            elif mechanism.name not in existing.get(name, {}):
                raise _Refused(KafkaError.RESOURCE_NOT_FOUND, DELETE_MISSING)
            else:
                changes[name] = (mechanism.name, None)
        except _Refused as refused:
            errors[name] = (refused.error, refused.message)
    return {(name, mech): cred for name, (mech, cred) in changes.items()}, errors


async def alter_user_scram_credentials(call: KafkaCall) -> KafkaAnswer:
    """AlterUserScramCredentials v0: the valid changes stored in one write."""
    store = _store(call)
    if store is None:  # a bare context without a credential store
        return _altered_refused(call, KafkaError.UNSUPPORTED_VERSION, "No SCRAM user store")
    changes, errors = _plan(call.body, store.entries())
    if changes:
        await trio.to_thread.run_sync(store.alter, changes)
    results = [{"user": name, "error_code": 0, "error_message": None} for name, _ in changes] + [
        {"user": name, "error_code": error.code, "error_message": message}
        for name, (error, message) in errors.items()
    ]
    return {"throttle_time_ms": 0, "results": results}


def _altered_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's `AlterUserScramCredentialsRequest.getErrorResponse`: the error per user."""
    body = call.body
    names = dict.fromkeys(op["name"] for op in [*body["deletions"], *body["upsertions"]])
    return {
        "throttle_time_ms": 0,
        "results": [{"user": n, "error_code": error.code, "error_message": message} for n in names],
    }


HANDLERS: dict[int, KafkaApi] = {
    DESCRIBE_USER_SCRAM_CREDENTIALS.key: KafkaApi(
        describe_user_scram_credentials, Requires(whole=_DESCRIBE_CLUSTER), _described_refused
    ),
    ALTER_USER_SCRAM_CREDENTIALS.key: KafkaApi(
        alter_user_scram_credentials, Requires(whole=_ALTER_CLUSTER), _altered_refused
    ),
}
