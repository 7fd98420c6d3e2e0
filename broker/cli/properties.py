"""``--command-config FILE``: Java-style client properties, as Kafka's tools read them.

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";
    ssl.truststore.type=PEM
    ssl.truststore.location=certs/ca.pem

Only what the tools can honour is accepted; any other key is an error (``UsageError``, exit
2) rather than a setting silently ignored.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from pathlib import Path


class UsageError(Exception):
    """Bad usage: a bad flag, file or setting (exit code 2)."""


PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
KNOWN_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "client.id",
    "request.timeout.ms",
)


@dataclass(frozen=True)
class ClientSettings:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    cafile: str | None = None  # PEM: the CAs that sign the broker's certificate
    keystore: str | None = None  # PEM: the client's key and certificate chain, one file
    key_password: str | None = None
    check_hostname: bool = True
    client_id: str = "kgroupd-admin"
    request_timeout_s: float = 30.0

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext:
        """The client's TLS context (the system's CAs unless a truststore is given)."""
        try:
            context = ssl.create_default_context(cafile=self.cafile)
            context.check_hostname = self.check_hostname
            if self.keystore is not None:
                context.load_cert_chain(self.keystore, password=self.key_password)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--command-config: cannot load the TLS files: {exc}") from None
        return context


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties' format: ``key=value``, ``key: value`` or ``key value``; ``#``
    and ``!`` comments; a trailing backslash continues the line; ``\\`` escapes."""
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        match = re.match(r"((?:[^\\=:\s]|\\.)*)\s*[=:\s]?\s*(.*)$", line.strip())
        assert match is not None
        props[_unescape(match.group(1))] = _unescape(match.group(2))
    return props


def _unescape(value: str) -> str:
    table = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(1)), value)


def _jaas(value: str) -> tuple[str, str, str]:
    """(login module, username, password) from a ``sasl.jaas.config`` value."""
    match = re.match(
        r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$", value, re.S
    )
    if match is None:
        raise UsageError(
            "--command-config: sasl.jaas.config must read "
            '\'<LoginModule> required username="..." password="...";\''
        )
    module, options = match.group(1), match.group(3)
    found = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', options))
    found |= {k: v for k, v in re.findall(r"(\w+)\s*=\s*([^\"\s;]+)", options) if k not in found}
    if module not in _LOGIN_MODULES:
        raise UsageError(
            f"--command-config: sasl.jaas.config login module {module} is not supported "
            "(PlainLoginModule or ScramLoginModule)"
        )
    if "username" not in found or "password" not in found:
        raise UsageError("--command-config: sasl.jaas.config needs username and password")
    return module, found["username"], found["password"]


def settings_from(props: dict[str, str], source: str = "--command-config") -> ClientSettings:
    unknown = sorted(set(props) - set(KNOWN_KEYS))
    if unknown:
        raise UsageError(
            f"{source}: unsupported setting(s) {', '.join(unknown)} "
            f"(supported: {', '.join(KNOWN_KEYS)})"
        )
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise UsageError(
            f"{source}: security.protocol {props['security.protocol']!r} is not one of "
            + ", ".join(PROTOCOLS)
        )
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if key in props and props[key].upper() != "PEM":
            raise UsageError(f"{source}: {key} {props[key]!r} is not supported (only PEM)")
    for key in ("ssl.truststore.location", "ssl.keystore.location"):
        if key in props and props.get(key.replace("location", "type"), "").upper() != "PEM":
            raise UsageError(f"{source}: {key} needs {key.replace('location', 'type')}=PEM")
        if key in props and not Path(props[key]).is_file():
            raise UsageError(f"{source}: {key} {props[key]!r}: no such file")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https")
    if algorithm.lower() not in ("https", ""):
        raise UsageError(
            f"{source}: ssl.endpoint.identification.algorithm {algorithm!r} "
            "(https, or empty to turn host name checks off)"
        )
    mechanism = username = password = None
    sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    if sasl:
        mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in MECHANISMS:
            raise UsageError(
                f"{source}: sasl.mechanism {mechanism} is not supported ({', '.join(MECHANISMS)})"
            )
        if "sasl.jaas.config" not in props:
            raise UsageError(f"{source}: {protocol} needs sasl.jaas.config")
        module, username, password = _jaas(props["sasl.jaas.config"])
        if mechanism not in _LOGIN_MODULES[module]:
            raise UsageError(f"{source}: {module.rsplit('.', 1)[-1]} cannot do {mechanism}")
    elif "sasl.mechanism" in props or "sasl.jaas.config" in props:
        raise UsageError(
            f"{source}: sasl.* settings need security.protocol SASL_PLAINTEXT or SASL_SSL"
        )
    tls = protocol in ("SSL", "SASL_SSL")
    if not tls and any(k.startswith("ssl.") for k in props):
        raise UsageError(f"{source}: ssl.* settings need security.protocol SSL or SASL_SSL")
    try:
        timeout_s = int(props.get("request.timeout.ms", "30000")) / 1000
    except ValueError:
        raise UsageError(f"{source}: request.timeout.ms must be a number") from None
    return ClientSettings(
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        username=username,
        password=password,
        cafile=props.get("ssl.truststore.location"),
        keystore=props.get("ssl.keystore.location"),
        key_password=props.get("ssl.key.password"),
        check_hostname=algorithm.lower() == "https",
        client_id=props.get("client.id", "kgroupd-admin"),
        request_timeout_s=timeout_s,
    )


def load_settings(path: str | None, source: str = "--command-config") -> ClientSettings:
    if path is None:
        return ClientSettings()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{source} {path}: {exc.strerror or exc}") from None
    return settings_from(parse_properties(text), source)
