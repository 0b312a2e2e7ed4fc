"""Audit events: who authenticated, who failed, and every denied request.

One structlog logger (`component="audit"`) so operators can route these lines apart
(`jq 'select(.component == "audit")'`). Each event carries the principal (or the
username tried), the client address, the API, the mechanism or the resource and the
operation: never record data, passwords, SASL messages or keys.
"""

from __future__ import annotations

from broker.logging import get_logger
from broker.security.session import Session

audit_log = get_logger(component="audit")


def authentication_succeeded(session: Session, mechanism: str) -> None:
    audit_log.info(
        "authentication_succeeded",
        principal=session.principal,
        client=session.client_host,
        mechanism=mechanism,
        listener=session.protocol.value,
    )


def authentication_failed(session: Session, mechanism: str, username: str, reason: str) -> None:
    audit_log.warning(
        "authentication_failed",
        principal=f"User:{username}" if username else None,
        client=session.client_host,
        mechanism=mechanism,
        listener=session.protocol.value,
        reason=reason,
    )


def request_denied(
    principal: str,
    client: str,
    api: str,
    resource_type: str,
    resource_name: str,
    operation: str,
) -> None:
    audit_log.warning(
        "request_denied",
        principal=principal,
        client=client,
        api=api,
        resource_type=resource_type,
        resource_name=resource_name,
        operation=operation,
    )
