"""Server side of SASL/PLAIN (RFC 4616), as Fluss's Authenticate (1038) carries it.

The token is `authzid NUL authcid NUL password`; Fluss clients send an empty authzid. A wrong user and a
wrong password get the same answer, and passwords are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac

from strom.common.errors import AuthenticateError
from strom.security.acl import Principal

PLAIN = "PLAIN"
MAX_TOKEN_BYTES = 4096


class PlainAuthenticator:
    """Checks PLAIN tokens against the users of a server-side JAAS configuration."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = {name: password.encode() for name, password in users.items()}

    def authenticate(self, mechanism: str, token: bytes) -> Principal:
        if mechanism.upper() != PLAIN:
            raise AuthenticateError(f"SASL mechanism '{mechanism}' is not enabled (enabled: {PLAIN})")
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticateError(f"SASL/PLAIN token of {len(token)} bytes is too long")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticateError("malformed SASL/PLAIN token: expected authzid NUL username NUL password")
        authzid, username_bytes, password = parts
        try:
            username = username_bytes.decode()
            authzid_text = authzid.decode()
        except UnicodeDecodeError:
            raise AuthenticateError("malformed SASL/PLAIN token: the user name is not UTF-8") from None
        if not username:
            raise AuthenticateError("malformed SASL/PLAIN token: empty user name")
        if authzid_text and authzid_text != username:
            raise AuthenticateError("SASL/PLAIN authorization id must be empty or equal to the user name")
        expected = self._users.get(username)
        # compare against something of the same shape when the user is unknown, so timing tells nothing
        matched = hmac.compare_digest(password, expected if expected is not None else b"\0" * len(password))
        if expected is None or not matched:
            raise AuthenticateError(
                f"Authentication failed: invalid username or password for user '{username}'"
            )
        return Principal.user(username)
