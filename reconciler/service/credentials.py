"""Named credentials and their roles (SPEC section 6, "Trust").

A credential is a name, one or more roles and a bearer token. The sidecar keeps only the token's
SHA-256: tokens are 256-bit random strings made by `new_token`, so a fast hash is as hard to
reverse as the token is to guess (the reasoning behind GitHub's and PyPI's token storage), and a
request costs one hash, not a key stretch.

Where they come from (all merged; a name given twice is an error):

    RECONCILER_TOKEN=<token>                       one credential "admin" with role admin
    RECONCILER_CREDENTIAL_<NAME>=<roles>:<token>   e.g. RECONCILER_CREDENTIAL_WORKER_A=worker:...
    credentials_file = "/etc/reconciler/creds.json"   hashes only, written by
                                                   `reconciler credential add NAME --role ROLE`

The file holds `{"credentials": [{"name", "roles", "sha256"}]}` and is created 0600; it never
holds a token: `credential add` shows the new token once and keeps only its hash.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from reconciler.core.errors import ReconcilerError

CREDENTIAL_ENV_PREFIX = "RECONCILER_CREDENTIAL_"
#: A token shorter than this is refused at start: it could be guessed, or be a placeholder.
MIN_TOKEN_CHARS = 24
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._@-]{0,99}$")


class CredentialError(ReconcilerError):
    """A credential (variable, file or command argument) is malformed; the message says which."""


class Role(StrEnum):
    """What a credential may do; see `service.auth` for the permissions of each."""

    WORKER = "worker"
    OPERATOR = "operator"
    EVIDENCE = "evidence"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Credential:
    """A credential as the sidecar keeps it: never the token, only its hash."""

    name: str
    roles: frozenset[Role]
    sha256: str


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def check_token(token: str, source: str) -> None:
    """Refuse an empty, short or padded token; `source` names where it came from."""
    if token != token.strip() or len(token) < MIN_TOKEN_CHARS:
        raise CredentialError(
            f"{source}: the token must be at least {MIN_TOKEN_CHARS} characters with no "
            "surrounding spaces (`reconciler credential token` prints a fresh one)")


def credential(name: str, roles: Iterable[str], token: str, source: str) -> Credential:
    """A credential from its parts, checked."""
    check_name(name, source)
    check_token(token, source)
    return Credential(name, parse_roles(roles, source), digest(token))


def check_name(name: str, source: str) -> None:
    if not NAME_PATTERN.match(name):
        raise CredentialError(f"{source}: credential name {name!r} must be 1 to 100 of "
                              "a-z 0-9 . _ @ - (starting with a letter or digit)")


def parse_roles(roles: Iterable[str], source: str) -> frozenset[Role]:
    names = [r.strip() for r in roles if r.strip()]
    unknown = sorted(set(names) - {r.value for r in Role})
    if unknown or not names:
        allowed = ", ".join(r.value for r in Role)
        raise CredentialError(f"{source}: roles must be among {allowed}; "
                              f"got {', '.join(names) or 'none'}")
    return frozenset(Role(r) for r in names)


def from_env(env: Mapping[str, str]) -> list[Credential]:
    """The `RECONCILER_CREDENTIAL_<NAME>=<roles>:<token>` credentials of `env`."""
    found = []
    for variable in sorted(env):
        if not variable.startswith(CREDENTIAL_ENV_PREFIX):
            continue
        name = variable.removeprefix(CREDENTIAL_ENV_PREFIX).lower().replace("_", "-")
        roles, sep, token = env[variable].partition(":")
        if not sep:
            raise CredentialError(f"{variable}: expected <roles>:<token>, e.g. worker:<token>")
        found.append(credential(name, roles.split(","), token, variable))
    return found


def read_file(path: Path) -> list[Credential]:
    """The credentials of a credentials file (hashes only); a missing file holds none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CredentialError(f"{path}: cannot read: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CredentialError(f"{path}: not valid JSON: {exc}") from None
    entries = data.get("credentials") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise CredentialError(f"{path}: expected {{\"credentials\": [...]}}")
    found = []
    for i, entry in enumerate(entries):
        where = f"{path}: credentials[{i}]"
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("roles"), list)
                and re.fullmatch(r"[0-9a-f]{64}", str(entry.get("sha256")))):
            raise CredentialError(f"{where}: needs name, roles (a list) and sha256 (64 hex)")
        check_name(entry["name"], where)
        found.append(Credential(entry["name"], parse_roles(map(str, entry["roles"]), where),
                                entry["sha256"]))
    return found


def add_to_file(path: Path, name: str, roles: Iterable[str]) -> str:
    """Add (or replace) credential `name` in the file, created 0600; the new token, which is
    stored nowhere: show it once."""
    token = new_token()
    added = credential(name, roles, token, "credential add")
    kept = [c for c in read_file(path) if c.name != name] + [added]
    body = json.dumps({"credentials": [
        {"name": c.name, "roles": sorted(c.roles), "sha256": c.sha256} for c in kept]}, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(body + "\n")
    os.replace(temporary, path)
    return token


class Keyring:
    """The credentials a service accepts, found by the hash of a presented token."""

    def __init__(self, credentials: Iterable[Credential]) -> None:
        self.credentials = tuple(credentials)
        names = [c.name for c in self.credentials]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise CredentialError(f"credential name(s) given more than once: {', '.join(twice)}")

    def __bool__(self) -> bool:
        return bool(self.credentials)

    def find(self, token: str) -> Credential | None:
        presented = digest(token)
        # Every credential is compared, in constant time each: the answer's timing says
        # nothing about which one (nearly) matched.
        found = None
        for c in self.credentials:
            if hmac.compare_digest(presented, c.sha256):
                found = c
        return found
