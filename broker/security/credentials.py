"""SCRAM credentials, kept as Kafka keeps them: per user and mechanism a salt, the stored and
server keys and the iteration count (never the password). PLAIN logins are checked against
them too (the password salted and iterated again, its stored key compared).

Users come from ``--sasl-users FILE`` (``USER:PASSWORD`` per line, ``#`` comments; applied at
every start, winning over stored credentials) and from AlterUserScramCredentials, which
persists them under ``--data-dir`` (``scram-credentials.json``, written atomically).

A login as a user that does not exist costs and looks the same as a wrong password: PLAIN
verifies the password against a dummy credential, and SCRAM answers the client-first message
with a mock salt and iteration count (RFC 5802's advice, as PostgreSQL does), derived from the
user name and a secret of this broker (kept under ``--data-dir`` in ``scram-mock-secret``, so
the same at every attempt and across restarts), of the same form as real ones. A mock never
verifies.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

# hashlib, hmac, pathlib and scramp are imported where used: a broker without SASL users
# (and without --data-dir) needs none of them
if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_ITERATIONS = 4096  # Kafka's ScramCredentialUtils default and minimum
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism maximum
# Kafka's ScramMechanism ids (AlterUserScramCredentials, DescribeUserScramCredentials)
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_IDS.items()}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
FILE_NAME = "scram-credentials.json"
SECRET_FILE = "scram-mock-secret"
SECRET_BYTES = 32
SALT_BYTES = 32  # the salts set_password makes (scramp's), so a mock one looks the same


class SecuritySetupError(ValueError):
    """A users file, certificate or key that cannot be used; the message says which and why
    (start-up stops with it, in one line)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's server asks for a user."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def _keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
    HMAC(SaltedPassword, "Server Key")."""
    import hashlib
    import hmac

    name = _HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", name)
    return hashlib.new(name, client_key).digest(), hmac.digest(salted_password, b"Server Key", name)


def from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    stored, server = _keys(mechanism, salted_password)
    return ScramCredential(salt, stored, server, iterations)


class CredentialStore:
    def __init__(self, path: Path | None = None, secret: bytes | None = None) -> None:
        self.path = path  # None: in memory only
        # what mock credentials of unknown users are derived from
        self.secret = secret if secret is not None else os.urandom(SECRET_BYTES)
        self.users: dict[str, dict[str, ScramCredential]] = {}
        # users as --sasl-users gave them (applied at every start, so never written here)
        self.from_file: set[str] = set()

    # --- changes --------------------------------------------------------------------------
    def set_password(self, user: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> None:
        """Credentials for every SCRAM mechanism (as ``kafka-configs --add-config
        'SCRAM-SHA-256=[password=...],SCRAM-SHA-512=[password=...]'`` makes)."""
        import scramp  # only when a password is set: a broker without SASL never needs it

        creds = {}
        for mechanism in MECHANISM_IDS:
            salt, stored, server, i = scramp.ScramMechanism(mechanism).make_auth_info(
                password, iteration_count=iterations
            )
            creds[mechanism] = ScramCredential(salt, stored, server, i)
        self.users[user] = creds

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.users.setdefault(user, {})[mechanism] = credential
        self.from_file.discard(user)

    def delete(self, user: str, mechanism: str) -> bool:
        creds = self.users.get(user)
        if creds is None or mechanism not in creds:
            return False
        self.from_file.discard(user)
        del creds[mechanism]
        if not creds:
            del self.users[user]
        return True

    # --- checks ---------------------------------------------------------------------------
    def scram(self, mechanism: str, user: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def scram_login(self, mechanism: str, user: str) -> tuple[ScramCredential, bool]:
        """The credential a SCRAM login as ``user`` runs against, and whether it is real (an
        unknown user's is a mock: see the module's docstring)."""
        cred = self.scram(mechanism, user)
        if cred is not None:
            return cred, True
        return self.mock(mechanism, user), False

    def mock(self, mechanism: str, user: str) -> ScramCredential:
        """The same for the same user at every attempt, unguessable without the secret."""
        import hmac

        name = _HASHES[mechanism]
        label = f"{mechanism}\0{user}".encode("utf-8", "surrogatepass")
        salt = hmac.digest(self.secret, b"salt\0" + label, "sha256")[:SALT_BYTES]
        stored = hmac.digest(self.secret, b"stored-key\0" + label, name)
        server = hmac.digest(self.secret, b"server-key\0" + label, name)
        return ScramCredential(salt, stored, server, DEFAULT_ITERATIONS)

    def check_plain(self, user: str, password: str) -> bool:
        """The password against the user's SCRAM credential (the strongest there is); an
        unknown user's against a mock one, the same work, and always refused."""
        creds = self.users.get(user, {})
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            cred = creds.get(mechanism)
            if cred is not None:
                return verify_password(mechanism, cred, password)
        verify_password("SCRAM-SHA-512", self.mock("SCRAM-SHA-512", user), password)
        return False

    # --- persistence ----------------------------------------------------------------------
    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        raw = json.loads(self.path.read_text())
        for user, creds in raw.items():
            for mechanism, c in creds.items():
                self.users.setdefault(user, {})[mechanism] = ScramCredential(
                    base64.b64decode(c["salt"]),
                    base64.b64decode(c["stored_key"]),
                    base64.b64decode(c["server_key"]),
                    int(c["iterations"]),
                )

    def save(self) -> None:
        """Write every credential atomically (temp file, fsync, rename)."""
        if self.path is None:
            return
        table = {
            user: {
                mechanism: {
                    "salt": base64.b64encode(c.salt).decode(),
                    "stored_key": base64.b64encode(c.stored_key).decode(),
                    "server_key": base64.b64encode(c.server_key).decode(),
                    "iterations": c.iterations,
                }
                for mechanism, c in sorted(creds.items())
            }
            for user, creds in sorted(self.users.items())
            if user not in self.from_file
        }
        _write_atomically(self.path, json.dumps(table, indent=1).encode())


def verify_password(mechanism: str, cred: ScramCredential, password: str) -> bool:
    """A password (PLAIN's) against a SCRAM credential: salted and iterated, its stored key
    compared."""
    import hashlib
    import hmac

    name = _HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password.encode(), cred.salt, cred.iterations)
    return hmac.compare_digest(_keys(mechanism, salted)[0], cred.stored_key)


def _write_atomically(path: Path, data: bytes) -> None:
    """Temp file (owner-only), fsync, rename."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def broker_secret(data_dir: str | None) -> bytes:
    from pathlib import Path

    """The secret mock credentials come from: kept under ``data_dir`` (made at the first
    start), else new at every start."""
    if not data_dir:
        return os.urandom(SECRET_BYTES)
    path = Path(data_dir) / SECRET_FILE
    try:
        secret = path.read_bytes() if path.exists() else b""
        if len(secret) != SECRET_BYTES:
            secret = os.urandom(SECRET_BYTES)
            _write_atomically(path, secret)
    except OSError as exc:
        raise SecuritySetupError(f"{path}: {exc.strerror or exc}") from None
    return secret


def read_users_file(path: str) -> list[tuple[str, str]]:
    """``USER:PASSWORD`` per line (the first colon splits), ``#`` comments, blank lines."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise SecuritySetupError(f"--sasl-users {path}: {exc.strerror or exc}") from None
    users: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        user, sep, password = stripped.partition(":")
        if not sep or not user or not password:
            raise SecuritySetupError(f"--sasl-users {path}, line {number}: not USER:PASSWORD")
        if user in seen:
            raise SecuritySetupError(f"--sasl-users {path}, line {number}: {user!r} again")
        seen.add(user)
        users.append((user, password))
    return users


def open_store(data_dir: str | None, users_file: str | None) -> CredentialStore:
    from pathlib import Path

    """The credentials stored under ``data_dir``, then the users file's over them."""
    store = CredentialStore(
        Path(data_dir) / FILE_NAME if data_dir else None, broker_secret(data_dir)
    )
    try:
        store.load()
    except (OSError, ValueError, KeyError) as exc:
        raise SecuritySetupError(f"{store.path}: unreadable SCRAM credentials: {exc}") from None
    if users_file is not None:
        for user, password in read_users_file(users_file):
            store.set_password(user, password)
            store.from_file.add(user)
    return store
