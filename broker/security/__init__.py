"""The broker's security pieces, each pure or owning one file of the data directory.

- `acl`: Kafka's ACL model and the allow/deny decision (pure);
- `acl_store`: ACLs persisted in `acls.json`, applied live;
- `credentials`: SCRAM credentials in `scram-credentials.json` (`tidelog users`);
- `jsonfile`: the locked, atomic, owner-only JSON file both stores use.

The SASL exchanges themselves are in protocol/sasl/ (our clients need them too).
docs/security.md says how to turn each piece on.
"""
