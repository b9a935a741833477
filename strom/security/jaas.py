"""Reading Fluss's JAAS lines for SASL/PLAIN, on both sides of a connection.

Server: `org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required user_admin="admin-secret"
user_alice="alice-secret";` lists the users and their passwords. Client: `... required username="alice"
password="alice-secret";` names the login. Values are double-quoted; a backslash escapes the next
character.
"""

from __future__ import annotations

import re

PLAIN_LOGIN_MODULE = "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule"

_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _options(jaas: str) -> list[tuple[str, str]]:
    return [(key, re.sub(r"\\(.)", r"\1", value)) for key, value in _OPTION.findall(jaas)]


def parse_jaas_credentials(jaas: str) -> tuple[str | None, str | None]:
    """Username and password of a client-side JAAS line (either may be missing)."""
    options = dict(_options(jaas))
    return options.get("username"), options.get("password")


def parse_jaas_users(jaas: str) -> dict[str, str]:
    """The `user_<name>="<password>"` entries of a server-side JAAS line."""
    return {
        key[len("user_") :]: value
        for key, value in _options(jaas)
        if key.startswith("user_") and len(key) > 5
    }


def jaas_for_users(credentials: dict[str, str]) -> str:
    """A server-side JAAS line for these users (Fluss's `security.sasl.plain.credentials` sugar)."""
    users = " ".join(f'user_{name}="{_escape(password)}"' for name, password in credentials.items())
    return f"{PLAIN_LOGIN_MODULE} required {users};"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
