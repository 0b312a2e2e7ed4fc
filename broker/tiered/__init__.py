"""Tiered storage's broker side: the trio runner of store calls, the uploader and
remote retention tasks (docs/retention.md "Tiered topics"). The store client, key layout and
manifest are storage.remote's."""
