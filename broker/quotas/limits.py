"""Which quota a connection is under, and how long it waits when over it.

Kafka's precedence (its `DefaultQuotaCallback`): for a user U and client id C, the
first entity that sets the key among (U, C), (U, default client), (U), (default user,
C), (default user, default client), (default user), (C), (default client) gives the
limit, and also decides who shares the measured rate: an entity naming a user alone
is measured across all of that user's clients, one naming a client id alone across
every user of that client id. Each (key, user, client) share has its own
`SampledRate`.

A client over its limit gets `throttle_time_ms` in its answer and its connection is
muted for that long (KIP-219): the connection handles no further request until then
(`mute`, `wait_unmuted`). The sharing rates are forgotten once idle for their whole
window.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from broker.quotas.rate import QUOTA_SAMPLES, QUOTA_WINDOW_MS, SampledRate
from broker.quotas.store import CLIENT_ID, USER, Entity, QuotaStore

# How often idle rates are swept (milliseconds).
SWEEP_EVERY_MS = 10_000

# (user, client id) as the rates are shared: "" where the limit does not name it.
Share = tuple[str, str]


def _entity(user: str | bool | None, client: str | bool | None) -> Entity:
    """An entity from a name, None (the default) or False (not part of it)."""
    pairs: list[tuple[str, str | None]] = []
    if user is not False:
        pairs.append((USER, user if isinstance(user, str) else None))
    if client is not False:
        pairs.append((CLIENT_ID, client if isinstance(client, str) else None))
    return tuple(sorted(pairs))


def _candidates(user: str, client: str) -> tuple[tuple[Entity, Share], ...]:
    """Kafka's eight entities in precedence order, each with the share it measures."""
    both = (user, client)
    return (
        (_entity(user, client), both),
        (_entity(user, None), both),
        (_entity(user, False), (user, "")),
        (_entity(None, client), both),
        (_entity(None, None), both),
        (_entity(None, False), (user, "")),
        (_entity(False, client), ("", client)),
        (_entity(False, None), ("", client)),
    )


class ClientQuotas:
    """The store's limits applied: rates per share, mutes per connection."""

    def __init__(
        self,
        store: QuotaStore,
        *,
        samples: int = QUOTA_SAMPLES,
        window_ms: int = QUOTA_WINDOW_MS,
        clock_ms: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        self._samples, self._window_ms = samples, window_ms
        self._clock_ms = clock_ms or (lambda: time.monotonic() * 1000.0)
        self._rates: dict[tuple[str, str, str], SampledRate] = {}
        self._swept_ms = 0.0

    @property
    def active(self) -> bool:
        """Whether any quota is set (else nothing is measured)."""
        return bool(self.store)

    def limit(self, key: str, user: str, client: str) -> tuple[float, Share] | None:
        """The limit on `key` for this user and client id, and who shares its rate."""
        for entity, share in _candidates(user, client):
            value = self.store.get(entity).get(key)
            if value is not None:
                return value, share
        return None

    @property
    def window_ms(self) -> int:
        """One window's length: the longest throttle a request quota gives (Kafka's)."""
        return self._window_ms

    def record(self, key: str, user: str, client: str, value: float) -> int:
        """Add `value` to the rate `key` is limited on; the throttle time (ms) it earns."""
        found = self.limit(key, user, client)
        if found is None:
            return 0
        bound, share = found
        now = self._clock_ms()
        rate = self._rate(key, share, now)
        rate.record(value, now)
        return rate.throttle_ms(bound, now)

    def unrecord(self, key: str, user: str, client: str, value: float) -> None:
        """Take back a recorded value (a throttled fetch sends no records: Kafka's rule)."""
        found = self.limit(key, user, client)
        if found is not None:
            now = self._clock_ms()
            self._rate(key, found[1], now).record(-value, now)

    def max_in_window(self, key: str, user: str, client: str) -> float | None:
        """The most one request may take without certain throttling (Kafka's
        `getMaxValueInQuotaWindow`: the limit over all windows but the current one)."""
        found = self.limit(key, user, client)
        if found is None:
            return None
        return found[0] * (self._samples - 1) * self._window_ms / 1000.0

    def _rate(self, key: str, share: Share, now: float) -> SampledRate:
        if now - self._swept_ms >= SWEEP_EVERY_MS:
            self._swept_ms = now
            self._rates = {
                k: r for k, r in self._rates.items() if now - r.last_event_ms() < r.idle_after_ms
            }
        rate = self._rates.get((key, *share))
        if rate is None:
            rate = self._rates[(key, *share)] = SampledRate(self._samples, self._window_ms)
        return rate
