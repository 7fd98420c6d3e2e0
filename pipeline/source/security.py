"""The source's client security options, named as Kafka's consumer configs with Spark's
``kafka.`` prefix: ``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``, ``kafka.ssl.keystore.*``,
``kafka.ssl.key.password`` and ``kafka.ssl.endpoint.identification.algorithm``.

They are checked on the driver (the files too) into a ``Security``, a frozen dataclass of
strings that pickles to the executors with the other options; an ``ssl.SSLContext`` cannot
be pickled, so each connection's user builds one with ``Security.ssl_context()``.

Python's ``ssl`` reads PEM only: truststores and keystores must be ``type=PEM`` (Kafka's PEM
keystore: the private key and its certificate chain in one file). Passwords are kept out of
``repr`` and of every error message."""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# the option names this module reads (lower case, as SourceOptions.parse normalises them)
SECURITY_OPTIONS = (
    "kafka.security.protocol",
    "kafka.sasl.mechanism",
    "kafka.sasl.jaas.config",
    "kafka.ssl.truststore.location",
    "kafka.ssl.truststore.type",
    "kafka.ssl.keystore.location",
    "kafka.ssl.keystore.type",
    "kafka.ssl.key.password",
    "kafka.ssl.endpoint.identification.algorithm",
)
# Kafka's, but meaningless for PEM stores: refused by parse_security with the reason
STORE_PASSWORDS = ("kafka.ssl.truststore.password", "kafka.ssl.keystore.password")
LOGIN_MODULES = (
    "org.apache.kafka.common.security.scram.ScramLoginModule",
    "org.apache.kafka.common.security.plain.PlainLoginModule",
)
_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_CLASS_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*")
_STORE_TYPES = ("JKS", "PKCS12", "PEM")
_TO_PEM = {
    "truststore": ("keytool -exportcert -rfc -keystore truststore.jks -alias CARoot -file ca.pem"),
    "keystore": (
        "keytool -importkeystore -srckeystore keystore.jks -destkeystore keystore.p12 "
        "-deststoretype PKCS12, then openssl pkcs12 -in keystore.p12 -out keystore.pem"
    ),
}


@dataclass(frozen=True)
class Security:
    """How the clients connect: the protocol, SASL credentials, PEM files for TLS."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    truststore: str | None = None  # PEM CA certificates; None: the system's CAs
    keystore: str | None = None  # PEM private key and certificate chain, for mutual TLS
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext:
        """A client context: the truststore's CAs (else the system's), the keystore's key and
        certificate if given, hostname checks unless switched off. ValueError, naming the
        option and file (never a password), when a file cannot be used."""
        try:
            context = ssl.create_default_context(cafile=self.truststore)
        except FileNotFoundError:
            raise ValueError(
                f"option kafka.ssl.truststore.location: no file {self.truststore}"
            ) from None
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"option kafka.ssl.truststore.location: {self.truststore} holds no PEM "
                f"certificate ({_reason(exc)}); kafka.ssl.truststore.type=PEM needs a file of "
                "PEM CA certificates"
            ) from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        if self.keystore is not None:
            self._load_keystore(context, self.keystore)
        return context

    def _load_keystore(self, context: ssl.SSLContext, path: str) -> None:
        where = f"option kafka.ssl.keystore.location: {path}"
        try:
            text = Path(path).read_text("ascii", errors="replace")
        except OSError as exc:
            raise ValueError(f"{where}: {exc.strerror or exc}") from None
        if "-----BEGIN CERTIFICATE-----" not in text:
            raise ValueError(f"{where} holds no PEM certificate ({_PEM_KEYSTORE})")
        if "PRIVATE KEY-----" not in text:
            raise ValueError(f"{where} holds no PEM private key ({_PEM_KEYSTORE})")
        encrypted = "ENCRYPTED PRIVATE KEY" in text or "Proc-Type: 4,ENCRYPTED" in text
        if encrypted and self.key_password is None:
            raise ValueError(f"{where}: its private key is encrypted; set kafka.ssl.key.password")

        def no_password() -> str:  # never let OpenSSL prompt on a terminal
            raise ValueError(f"{where}: its private key is encrypted; set kafka.ssl.key.password")

        try:
            context.load_cert_chain(path, password=self.key_password or no_password)
        except ssl.SSLError as exc:
            if encrypted:
                raise ValueError(
                    f"{where}: kafka.ssl.key.password does not decrypt its private key"
                ) from None
            raise ValueError(
                f"{where}: cannot load its key and certificate ({_reason(exc)})"
            ) from None

    def aiokafka_args(self) -> dict[str, Any]:
        """aiokafka's client arguments (a fresh SSL context each call)."""
        args: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            args["ssl_context"] = self.ssl_context()
        if self.sasl:
            args["sasl_mechanism"] = self.mechanism
            args["sasl_plain_username"] = self.username
            args["sasl_plain_password"] = self.password
        return args


_PEM_KEYSTORE = "a PEM keystore holds the private key and its certificate chain in one file"


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


def parse_security(opts: Mapping[str, str]) -> Security:
    """The security options of ``opts`` (names lower case), checked, files included."""
    raw_protocol = opts.get("kafka.security.protocol", "PLAINTEXT")
    protocol = raw_protocol.strip().upper()
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"option kafka.security.protocol must be one of {', '.join(PROTOCOLS)}, "
            f"got {raw_protocol!r}"
        )
    security = Security(protocol=protocol)
    for prefix, wanted, applies in (
        ("kafka.sasl.", "SASL_PLAINTEXT or SASL_SSL", security.sasl),
        ("kafka.ssl.", "SSL or SASL_SSL", security.tls),
    ):
        stray = sorted(n for n in opts if n.startswith(prefix))
        if stray and not applies:
            raise ValueError(
                f"option{'s' if len(stray) > 1 else ''} {', '.join(stray)} need "
                f"kafka.security.protocol {wanted} (it is {protocol}); they would be ignored"
            )
    sasl: dict[str, Any] = {}
    if security.sasl:
        sasl = _sasl(opts)
    tls: dict[str, Any] = {}
    if security.tls:
        tls = _tls(opts)
    security = Security(protocol=protocol, **sasl, **tls)
    if security.tls:
        security.ssl_context()  # the files are read now, on the driver, to fail early
    return security


def _sasl(opts: Mapping[str, str]) -> dict[str, Any]:
    raw = opts.get("kafka.sasl.mechanism", "GSSAPI")  # Kafka's default
    mechanism = raw.strip().upper()
    if mechanism not in MECHANISMS:
        raise ValueError(
            f"option kafka.sasl.mechanism {raw!r} is not supported by the kgroupd source; "
            f"use one of {', '.join(MECHANISMS)}"
            + (" (GSSAPI is Kafka's default when it is not set)" if mechanism == "GSSAPI" else "")
        )
    jaas = opts.get("kafka.sasl.jaas.config")
    if not jaas or not jaas.strip():
        raise ValueError(
            f"option kafka.sasl.jaas.config is required with kafka.sasl.mechanism {mechanism}, "
            "e.g. org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="...";'
        )
    username, password = parse_jaas(jaas)
    return {"mechanism": mechanism, "username": username, "password": password}


def _tls(opts: Mapping[str, str]) -> dict[str, Any]:
    for name in STORE_PASSWORDS:
        store = name.split(".")[2]
        if name in opts:
            raise ValueError(
                f"option {name} is not supported: the kgroupd source reads "
                "PEM stores only, which have no store password (Kafka refuses one with PEM too)"
                + ("; an encrypted key takes kafka.ssl.key.password" if store == "keystore" else "")
            )
    found: dict[str, str | None] = {}
    for store in ("truststore", "keystore"):
        location = opts.get(f"kafka.ssl.{store}.location") or None
        raw_type = opts.get(f"kafka.ssl.{store}.type", "JKS")  # Kafka's default
        kind = raw_type.strip().upper()
        if kind not in _STORE_TYPES:
            raise ValueError(
                f"option kafka.ssl.{store}.type must be PEM (JKS and PKCS12 are Kafka's "
                f"others), got {raw_type!r}"
            )
        if location is not None and kind != "PEM":
            raise ValueError(
                f"option kafka.ssl.{store}.type is {kind}"
                + (" (Kafka's default)" if f"kafka.ssl.{store}.type" not in opts else "")
                + f": Python's ssl module cannot read {kind} stores; convert the {store} to "
                f"PEM ({_TO_PEM[store]}) and set kafka.ssl.{store}.type=PEM"
            )
        found[store] = location
    key_password = opts.get("kafka.ssl.key.password")
    if key_password is not None and found["keystore"] is None:
        raise ValueError("option kafka.ssl.key.password needs kafka.ssl.keystore.location")
    raw_algorithm = opts.get("kafka.ssl.endpoint.identification.algorithm", "https")
    algorithm = raw_algorithm.strip().lower()
    if algorithm not in ("https", ""):
        raise ValueError(
            "option kafka.ssl.endpoint.identification.algorithm must be https (check the "
            f"broker's host name, the default) or empty (do not), got {raw_algorithm!r}"
        )
    return {
        "truststore": found["truststore"],
        "keystore": found["keystore"],
        "key_password": key_password or None,
        "check_hostname": algorithm == "https",
    }


# --- Kafka's JAAS line -----------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|([=;]))', re.DOTALL)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: ("word", w), ("string", s) or ("sym", "=" or ";"). Errors never
    quote the text: it holds a password."""
    out = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(
                "option kafka.sasl.jaas.config cannot be parsed (an unterminated quote?)"
            )
        quoted, word, sym = match.groups()
        if quoted is not None:
            out.append(("string", re.sub(r"\\(.)", r"\1", quoted, flags=re.DOTALL)))
        elif word is not None:
            out.append(("word", word))
        else:
            out.append(("sym", sym))
        pos = match.end()
    return out


def parse_jaas(text: str) -> tuple[str, str]:
    """The username and password of a JAAS line as Kafka's ``sasl.jaas.config`` takes it:
    ``LoginModuleClass controlFlag key="value" ...;`` with Kafka's SCRAM or PLAIN login
    module (a shaded package prefix, e.g. ``kafkashaded.``, is allowed)."""
    what = "option kafka.sasl.jaas.config"
    tokens = _tokens(text)
    if (
        not tokens
        or tokens[0][0] != "word"
        or not _CLASS_NAME.fullmatch(tokens[0][1])
        or tokens[1:2] == [("sym", "=")]
    ):
        raise ValueError(f"{what} must start with a login module class name")
    module = tokens[0][1]
    if not any(module == m or module.endswith("." + m) for m in LOGIN_MODULES):
        raise ValueError(
            f"{what}: login module {module} is not supported by the kgroupd source; use "
            f"{' or '.join(LOGIN_MODULES)} with username and password"
        )
    if len(tokens) < 2 or tokens[1][0] != "word" or tokens[1][1].lower() not in _CONTROL_FLAGS:
        raise ValueError(
            f"{what}: the login module must be followed by a control flag "
            f"({', '.join(_CONTROL_FLAGS)})"
        )
    options: dict[str, str] = {}
    pos = 2
    while pos < len(tokens) and tokens[pos] != ("sym", ";"):
        name = tokens[pos]
        if (
            name[0] != "word"
            or pos + 2 >= len(tokens)
            or tokens[pos + 1] != ("sym", "=")
            or tokens[pos + 2][0] == "sym"
        ):
            raise ValueError(f"{what}: expected name=value options after the control flag")
        options[name[1]] = tokens[pos + 2][1]
        pos += 3
    if pos >= len(tokens):
        raise ValueError(f"{what} must end with ';'")
    if pos != len(tokens) - 1:
        raise ValueError(f"{what} must hold exactly one login module (text follows the first ';')")
    if options.get("tokenauth", "").lower() == "true":
        raise ValueError(f"{what}: delegation tokens (tokenauth=true) are not supported")
    username, password = options.get("username"), options.get("password")
    if not username:
        raise ValueError(f'{what} gives no username (username="...")')
    if not password:
        raise ValueError(f'{what} gives no password (password="...")')
    return username, password
