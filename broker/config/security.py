"""The security flags (Kafka's config names in the help) and their checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kgroupd.broker.config.types import at_least_one, non_negative, truth

if TYPE_CHECKING:
    from kgroupd.broker.config.listeners import Listener

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# The SASL mechanisms kgroupd offers (``kgroupd.broker.security.sasl``) and the values of
# --ssl-client-auth (``kgroupd.broker.security.tls``): named here, so reading the flags
# imports neither scramp nor ssl.
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("none", "requested", "required")


def _mechanisms(text: str) -> str:
    names = [m.strip().upper() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the mechanisms kgroupd offers are {', '.join(MECHANISMS)}"
        )
    return ",".join(names)


def _client_auth(text: str) -> str:
    value = text.strip().lower()
    if value not in CLIENT_AUTH:
        raise argparse.ArgumentTypeError(f"{text!r} is not required, requested or none")
    return value


def _authorizer(text: str) -> str | None:
    value = text.strip().lower()
    if value in ("", "none"):
        return None
    if value != "acl":
        raise argparse.ArgumentTypeError(f"{text!r}: kgroupd's authorizer is 'acl' (or none)")
    return value


# (flag, BrokerConfig field, type, help): appended to the broker's flags
OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--ssl-certfile",
        "ssl_certfile",
        str,
        "PEM certificate chain of SSL and SASL_SSL listeners (Kafka: ssl.keystore.location "
        "with ssl.keystore.type=PEM)",
    ),
    ("--ssl-keyfile", "ssl_keyfile", str, "PEM private key of --ssl-certfile"),
    (
        "--ssl-cafile",
        "ssl_cafile",
        str,
        "PEM certificates of the CAs that sign client certificates (Kafka: "
        "ssl.truststore.location)",
    ),
    (
        "--ssl-client-auth",
        "ssl_client_auth",
        _client_auth,
        "required, requested or none: whether TLS clients must present a certificate "
        "(Kafka: ssl.client.auth)",
    ),
    (
        "--sasl-enabled-mechanisms",
        "sasl_enabled_mechanisms",
        _mechanisms,
        "comma-separated SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512 (Kafka: sasl.enabled.mechanisms)",
    ),
    (
        "--sasl-users",
        "sasl_users",
        str,
        "file of USER:PASSWORD lines (# comments) applied at every start; they win over "
        "credentials stored with AlterUserScramCredentials",
    ),
    (
        "--connections-max-reauth-ms",
        "connections_max_reauth_ms",
        non_negative,
        "SASL sessions last this long; clients re-authenticate on the connection before "
        "(KIP-368; Kafka: connections.max.reauth.ms; 0: forever)",
    ),
    (
        "--sasl-server-max-receive-size",
        "sasl_server_max_receive_size",
        at_least_one,
        "the maximum receive size allowed before and during initial SASL authentication; a "
        "larger frame fails the authentication and closes the connection (Kafka: "
        "sasl.server.max.receive.size)",
    ),
    (
        "--connection-failed-authentication-delay-ms",
        "connection_failed_authentication_delay_ms",
        non_negative,
        "connection close delay on failed authentication: the time by which the answer and "
        "the close are delayed on authentication failure; must be less than "
        "--connections-max-idle-ms (Kafka: connection.failed.authentication.delay.ms)",
    ),
    (
        "--authorizer",
        "authorizer",
        _authorizer,
        "acl: check every request against ACLs (CreateAcls/DescribeAcls/DeleteAcls; kept "
        "under --data-dir); none: allow everything (Kafka: authorizer.class.name)",
    ),
    (
        "--super-users",
        "super_users",
        str,
        "principals that pass every ACL check, ';'-separated, e.g. 'User:admin;User:CN=ops' "
        "(Kafka: super.users)",
    ),
    (
        "--allow-everyone-if-no-acl-found",
        "allow_everyone_if_no_acl_found",
        truth,
        "true: a resource without any ACL is open to everyone (Kafka: "
        "allow.everyone.if.no.acl.found)",
    ),
]


class SecuritySettings(Protocol):
    @property
    def ssl_certfile(self) -> str | None: ...

    @property
    def ssl_cafile(self) -> str | None: ...

    @property
    def ssl_client_auth(self) -> str: ...

    @property
    def sasl_users(self) -> str | None: ...

    @property
    def data_dir(self) -> str | None: ...

    @property
    def connections_max_idle_ms(self) -> int: ...

    @property
    def connection_failed_authentication_delay_ms(self) -> int: ...


def check(settings: SecuritySettings, listeners: Sequence[Listener]) -> str | None:
    """Why these listeners cannot be served with these settings, or None."""
    protocols = {listener.protocol for listener in listeners}
    if protocols & set(TLS_PROTOCOLS) and settings.ssl_certfile is None:
        return "an SSL or SASL_SSL listener needs --ssl-certfile (and --ssl-keyfile)"
    if settings.ssl_client_auth != "none" and settings.ssl_cafile is None:
        return f"--ssl-client-auth {settings.ssl_client_auth} needs --ssl-cafile"
    delay, idle = (
        settings.connection_failed_authentication_delay_ms,
        settings.connections_max_idle_ms,
    )
    if delay >= idle:  # as Kafka requires, so a delayed answer is not taken for idleness
        return (
            f"--connection-failed-authentication-delay-ms ({delay}) must be less than "
            f"--connections-max-idle-ms ({idle})"
        )
    if protocols & set(SASL_PROTOCOLS) and settings.sasl_users is None and not settings.data_dir:
        return (
            "a SASL listener needs users: --sasl-users FILE, or --data-dir with credentials "
            "stored by AlterUserScramCredentials"
        )
    return None
