"""Kafka-style listeners: ``--listeners NAME://HOST:PORT[,...]``, ``--advertised-listeners``
and ``--listener-security-protocol-map NAME:PROTOCOL[,...]``, parsed and checked with Kafka's
rules (KafkaConfig / CoreUtils.listenerListToEndPoints):

- an entry is ``NAME://HOST:PORT``; HOST may be empty (every interface) or ``[IPv6]``;
- every listener name is in the security protocol map, whose default maps PLAINTEXT, SSL,
  SASL_PLAINTEXT and SASL_SSL to themselves;
- listener names are unique, and so are their ports (0, a free port, excepted);
- advertised listeners name listeners that exist, and never advertise 0.0.0.0 (or ``::``);
  a listener not advertised is advertised as it listens (the hostname for an empty host).

Without ``--listeners`` the shorthand ``--host/--port/--advertised-host/--advertised-port``
makes one listener named PLAINTEXT. Every protocol of the map is served
(``kgroupd.broker.security``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_PROTOCOL_MAP",
    "Endpoint",
    "Listener",
    "ListenerError",
    "advertised_address",
    "build_listeners",
    "parse_endpoints",
    "parse_protocol_map",
]


class ListenerError(ValueError):
    """Listener settings Kafka would refuse; the message says which and why."""


DEFAULT_PROTOCOL_MAP = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
SERVED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str  # "" binds every interface
    port: int


@dataclass(frozen=True, slots=True)
class Listener:
    """One socket to bind, and the address clients that reach it are told to use."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str | None  # None: as bound (the hostname for an empty host)
    advertised_port: int | None  # None: the bound port


def parse_endpoints(text: str, what: str) -> list[Endpoint]:
    out: list[Endpoint] = []
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        name, sep, rest = raw.partition("://")
        if not sep or not name:
            raise ListenerError(f"{what}: {raw!r} is not NAME://HOST:PORT")
        if rest.startswith("["):
            close = rest.find("]")
            if close < 0 or rest[close + 1 : close + 2] != ":":
                raise ListenerError(f"{what}: {raw!r} is not NAME://[IPV6]:PORT")
            host, port_text = rest[1:close], rest[close + 2 :]
        else:
            host, sep, port_text = rest.rpartition(":")
            if not sep:
                raise ListenerError(f"{what}: {raw!r} has no port")
        try:
            port = int(port_text)
        except ValueError:
            raise ListenerError(f"{what}: {raw!r} has no valid port") from None
        if not 0 <= port <= 65535:
            raise ListenerError(f"{what}: {raw!r}: the port must be between 0 and 65535")
        out.append(Endpoint(name.upper(), host, port))
    if not out:
        raise ListenerError(f"{what} is empty")
    return out


def parse_protocol_map(text: str | None) -> dict[str, str]:
    if text is None:
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, str] = {}
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        name, sep, protocol = raw.partition(":")
        if not sep or not name or not protocol:
            raise ListenerError(f"--listener-security-protocol-map: {raw!r} is not NAME:PROTOCOL")
        protocol = protocol.upper()
        if protocol not in DEFAULT_PROTOCOL_MAP:
            raise ListenerError(
                f"--listener-security-protocol-map: unknown security protocol {protocol!r}"
            )
        if name.upper() in out:
            raise ListenerError(f"--listener-security-protocol-map names {name!r} twice")
        out[name.upper()] = protocol
    return out


def build_listeners(
    listeners: str | None,
    advertised_listeners: str | None,
    protocol_map: str | None,
    host: str,
    port: int,
    advertised_host: str | None,
    advertised_port: int | None,
) -> list[Listener]:
    """The listeners to bind, checked as Kafka checks them (``ListenerError`` otherwise)."""
    if listeners is None:
        if advertised_listeners is not None:
            raise ListenerError("--advertised-listeners needs --listeners")
        return [Listener("PLAINTEXT", "PLAINTEXT", host, port, advertised_host, advertised_port)]
    protocols = parse_protocol_map(protocol_map)
    bound = parse_endpoints(listeners, "--listeners")
    names = [e.name for e in bound]
    if len(set(names)) != len(names):
        raise ListenerError(f"--listeners: each listener must have a different name: {names}")
    ports = [e.port for e in bound if e.port != 0]
    if len(set(ports)) != len(ports):
        raise ListenerError(f"--listeners: each listener must have a different port: {ports}")
    for e in bound:
        if e.name not in protocols:
            raise ListenerError(
                f"--listeners: no security protocol defined for listener {e.name} "
                "(see --listener-security-protocol-map)"
            )
        if protocols[e.name] not in SERVED_PROTOCOLS:
            raise ListenerError(
                f"listener {e.name}: security protocol {protocols[e.name]} is not served yet "
                f"(kgroupd serves {', '.join(SERVED_PROTOCOLS)})"
            )
    advertised: dict[str, Endpoint] = {}
    if advertised_listeners is not None:
        for e in parse_endpoints(advertised_listeners, "--advertised-listeners"):
            if e.name not in names:
                raise ListenerError(
                    f"--advertised-listeners: {e.name} is not one of --listeners ({names})"
                )
            if e.name in advertised:
                raise ListenerError(f"--advertised-listeners names {e.name} twice")
            if e.host in ("0.0.0.0", "::", ""):
                raise ListenerError(
                    f"--advertised-listeners: {e.name} cannot advertise the non-routable "
                    f"address {e.host or '(empty)'}"
                )
            advertised[e.name] = e
    out = []
    for e in bound:
        a = advertised.get(e.name)
        out.append(
            Listener(
                e.name,
                protocols[e.name],
                e.host,
                e.port,
                a.host if a else None,
                (a.port or None) if a else None,
            )
        )
    return out


def advertised_address(listener: Listener, bound_port: int) -> tuple[str, int]:
    host = listener.advertised_host
    if host is None:
        import socket

        host = socket.gethostname() if listener.host in ("0.0.0.0", "::", "") else listener.host
    return host, listener.advertised_port or bound_port
