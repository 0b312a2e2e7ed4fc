"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), both sides, sans-I/O.

The exchange (every message UTF-8 text of comma-separated `key=value` attributes):

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<ClientProof, base64>
    server-final   v=<ServerSignature, base64>

What the broker stores per user and mechanism is `ScramCredential`: the salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"). Neither lets anyone log in: a login needs
ClientKey, whose hash is all the store holds. No channel binding (Kafka has none
either); passwords are UTF-8 without SASLprep, as Kafka's ScramFormatter does, so a
Java client and ours derive the same keys.

An unknown user gets a made-up credential (`decoy`) and fails at the proof, as RFC
5802 §9 advises, so an attacker cannot tell "no such user" from "wrong password". The
broker's decoy (broker/security/credentials.py) is derived from the name with a
server secret, so it answers the same salt every time as a real user does; the
random `random_decoy` is only for callers without a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from protocol.errors import IllegalSaslState, SaslAuthenticationFailed, UnsupportedSaslMechanism

# RFC 7677 §4: at least 4096 iterations; Kafka refuses more than 16384 (a server
# asking a client for millions would make every login a denial of service).
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384
DEFAULT_ITERATIONS = 8192
# Random bytes of a new salt and of each side's nonce (RFC 5802 asks for "sufficiently random").
SALT_BYTES = 32
NONCE_BYTES = 24
# Longest SCRAM message we parse: usernames, nonces and a 64-byte proof fit many times over.
MESSAGE_BYTES_MAX = 4096
# c=biws: base64 of the GS2 header "n,," (no channel binding, no authorization identity).
_GS2_HEADER = "n,,"


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM variant: its SASL name and hash (hashlib name)."""

    name: str
    hash_name: str

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(password, salt, i) of RFC 5802 §2.2: PBKDF2 with HMAC over this hash."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512")
SCRAM_MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
# Every SASL mechanism Tidelog speaks, in Kafka's spelling.
MECHANISMS: tuple[str, ...] = ("PLAIN", *SCRAM_MECHANISMS)


def scram_mechanism(name: str) -> ScramMechanism:
    """The SCRAM variant called `name`; UNSUPPORTED_SASL_MECHANISM otherwise."""
    try:
        return SCRAM_MECHANISMS[name]
    except KeyError:
        raise UnsupportedSaslMechanism(f"unsupported SCRAM mechanism {name!r}") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps for one user and mechanism (RFC 5802 §3); never the password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def derive_credential(
    mechanism: ScramMechanism,
    password: str,
    *,
    salt: bytes | None = None,
    iterations: int = DEFAULT_ITERATIONS,
) -> ScramCredential:
    """The stored form of `password` (a fresh random salt unless one is given)."""
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ValueError(f"iterations must be in [{ITERATIONS_MIN}, {ITERATIONS_MAX}]")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = mechanism.salted_password(password, salt, iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=mechanism.h(client_key),
        server_key=mechanism.hmac(salted, b"Server Key"),
    )


def random_decoy(mechanism: ScramMechanism, username: str) -> ScramCredential:
    """A made-up credential that no proof matches. A fresh salt each call: a client that
    asks twice can tell the name is unknown, so the broker passes its own stable decoy."""
    size = len(mechanism.h(b""))
    return ScramCredential(
        secrets.token_bytes(SALT_BYTES),
        DEFAULT_ITERATIONS,
        secrets.token_bytes(size),
        secrets.token_bytes(size),
    )


def password_matches(mechanism: ScramMechanism, credential: ScramCredential, password: str) -> bool:
    """Whether `password` derives `credential` (how PLAIN logins check a SCRAM store)."""
    candidate = derive_credential(
        mechanism, password, salt=credential.salt, iterations=credential.iterations
    )
    return hmac.compare_digest(candidate.stored_key, credential.stored_key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise SaslAuthenticationFailed(f"SCRAM {what} is not base64") from exc


def _new_nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)  # printable, no ',' (RFC 5802 §7)


def escape_name(name: str) -> str:
    """A username as a SCRAM `saslname` (',' and '=' escaped, RFC 5802 §5.1)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(text: str) -> str:
    """The username in a `saslname`; any '=' not starting =2C or =3D is malformed."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            code = text[i + 1 : i + 3]
            if code not in ("2C", "3D"):
                raise SaslAuthenticationFailed("malformed SCRAM username")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _decode(message: bytes, what: str) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise SaslAuthenticationFailed(f"SCRAM {what} longer than {MESSAGE_BYTES_MAX} bytes")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SaslAuthenticationFailed(f"SCRAM {what} is not UTF-8") from exc


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """`k=v,k=v` in order; a part without '=' is malformed."""
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SaslAuthenticationFailed(f"malformed SCRAM {what}")
        pairs.append((key, value))
    return pairs


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _auth_message(client_first_bare: str, server_first: str, client_final_bare: str) -> bytes:
    return f"{client_first_bare},{server_first},{client_final_bare}".encode()


class ScramServer:
    """The broker's side of one exchange: `first(client_first)`, then `final(client_final)`.

    `lookup(username)` returns the user's credential for this mechanism, or None;
    `decoy(username)` what to answer for a name `lookup` does not know (the proof then
    fails as a wrong password's does).
    After `final` returns, `username` is the authenticated user. Any failure raises
    SASL_AUTHENTICATION_FAILED (a step out of order: ILLEGAL_SASL_STATE) and the
    exchange is over.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        *,
        decoy: Callable[[str], ScramCredential] | None = None,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._decoy = decoy or (lambda name: random_decoy(mechanism, name))
        self._server_nonce = nonce if nonce is not None else _new_nonce()
        self._step = "first"
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._client_first_bare = ""
        self._gs2_header = b""
        self._server_first = ""
        self._nonce = ""
        self._name = ""
        self.username: str | None = None  # set once the proof checked out
        self.tried_username = ""  # who the client claims to be (for audit lines)

    @property
    def done(self) -> bool:
        return self._step == "done"

    def first(self, client_first: bytes) -> bytes:
        """Answer the client-first message with the salt, iterations and combined nonce."""
        self._expect("first")
        self._step = "failed"
        text = _decode(client_first, "client-first message")
        gs2_flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2_flag not in ("n", "y"):
            raise SaslAuthenticationFailed("SCRAM channel binding is not supported")
        attrs = _attributes(bare, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise SaslAuthenticationFailed("malformed SCRAM client-first message")
        name = unescape_name(attrs[0][1])
        self.tried_username = name
        if authzid and authzid != f"a={escape_name(name)}":
            raise SaslAuthenticationFailed("SCRAM authorization identity must be the user itself")
        if any(k == "m" or (k == "tokenauth" and v == "true") for k, v in attrs[2:]):
            raise SaslAuthenticationFailed("SCRAM extension not supported")
        credential = self._lookup(name) if name else None
        self._known_user = credential is not None
        if credential is None:  # a decoy, so "no such user" looks like "wrong password"
            credential = self._decoy(name)
        self._credential, self._name = credential, name
        self._nonce = attrs[1][1] + self._server_nonce
        self._client_first_bare = bare
        self._gs2_header = f"{gs2_flag},{authzid},".encode()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._step = "final"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """Check the client's proof; the server-final message proves us to the client."""
        self._expect("final")
        self._step = "failed"
        text = _decode(client_final, "client-final message")
        bare, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationFailed("SCRAM client-final message has no proof")
        attrs = dict(_attributes(bare, "client-final message"))
        channel = _unb64(attrs.get("c", ""), "channel binding")
        if channel != self._gs2_header:
            raise SaslAuthenticationFailed("SCRAM channel binding does not match the GS2 header")
        if attrs.get("r") != self._nonce:
            raise SaslAuthenticationFailed("SCRAM nonce does not match")
        proof = _unb64(proof_text, "proof")
        credential = self._credential
        assert credential is not None
        mech = self.mechanism
        auth = _auth_message(self._client_first_bare, self._server_first, bare)
        signature = mech.hmac(credential.stored_key, auth)
        if len(proof) != len(signature):
            raise SaslAuthenticationFailed("authentication failed: invalid credentials")
        client_key = _xor(proof, signature)
        valid = hmac.compare_digest(mech.h(client_key), credential.stored_key)
        if not (valid and self._known_user):
            raise SaslAuthenticationFailed("authentication failed: invalid credentials")
        self.username = self._name
        self._step = "done"
        return f"v={_b64(mech.hmac(credential.server_key, auth))}".encode()

    def _expect(self, step: str) -> None:
        if self._step != step:
            raise IllegalSaslState(f"SCRAM step {step!r} out of order (state {self._step!r})")


class ScramClient:
    """Our clients' side: `first()`, `final(server_first)`, then `verify(server_final)`.

    `verify` checks that the server knew the user's ServerKey, so a client is not
    fooled by a man in the middle that only relays (without TLS it can still read).
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._username, self._password = username, password
        self._nonce = nonce if nonce is not None else _new_nonce()
        self._client_first_bare = f"n={escape_name(username)},r={self._nonce}"
        self._server_signature = b""
        self._step = "first"

    def first(self) -> bytes:
        self._expect("first", "final")
        return (_GS2_HEADER + self._client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        self._expect("final", "verify")
        text = _decode(server_first, "server-first message")
        attrs = dict(_attributes(text, "server-first message"))
        if "e" in attrs:
            raise SaslAuthenticationFailed(f"server refused: {attrs['e']}")
        nonce, salt_text, iterations_text = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslAuthenticationFailed("SCRAM server nonce does not extend ours")
        if salt_text is None or iterations_text is None or not iterations_text.isdigit():
            raise SaslAuthenticationFailed("malformed SCRAM server-first message")
        iterations = int(iterations_text)
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise SaslAuthenticationFailed(f"SCRAM iteration count {iterations} out of range")
        mech = self.mechanism
        salted = mech.salted_password(self._password, _unb64(salt_text, "salt"), iterations)
        client_key = mech.hmac(salted, b"Client Key")
        bare = f"c={_b64(_GS2_HEADER.encode())},r={nonce}"
        auth = _auth_message(self._client_first_bare, text, bare)
        proof = _xor(client_key, mech.hmac(mech.h(client_key), auth))
        self._server_signature = mech.hmac(mech.hmac(salted, b"Server Key"), auth)
        return f"{bare},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        self._expect("verify", "done")
        attrs = dict(_attributes(_decode(server_final, "server-final message"), "server-final"))
        if "e" in attrs:
            raise SaslAuthenticationFailed(f"server refused: {attrs['e']}")
        signature = _unb64(attrs.get("v", ""), "server signature")
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslAuthenticationFailed("SCRAM server signature does not match")

    def _expect(self, step: str, following: str) -> None:
        if self._step != step:
            raise IllegalSaslState(f"SCRAM step {step!r} out of order")
        self._step = following
