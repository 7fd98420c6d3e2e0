"""The source's client security options, parsed (no Spark, no broker): Kafka's JAAS line,
protocols and mechanisms, PEM trust- and keystores, and the errors for what Python's ssl
cannot do (JKS, PKCS12) or what is missing. Secrets never show in errors or reprs."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from kgroupd.pipeline.source import KgroupdStreamReader, SourceOptions
from kgroupd.pipeline.source.security import Security, parse_jaas
from tests.support.certs import Certs, make_certs

SECRET = 's3cr=t;"pw'  # characters the JAAS parser must keep inside quotes
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="s3cr=t;\\"pw";'
)
KEY_SECRET = "key-pass-123"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def keystore(certs: Certs) -> Path:
    """Kafka's PEM keystore: the private key and its certificate in one file."""
    path = certs.ca.parent / "keystore.pem"
    path.write_bytes(certs.client_key.read_bytes() + certs.client_cert.read_bytes())
    return path


@pytest.fixture(scope="module")
def encrypted_keystore(certs: Certs) -> Path:
    key = serialization.load_pem_private_key(certs.client_key.read_bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_SECRET.encode()),
    )
    path = certs.ca.parent / "keystore-encrypted.pem"
    path.write_bytes(certs.client_cert.read_bytes() + encrypted)
    return path


def parse(**options: str) -> SourceOptions:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9093", "subscribe": "t"}
    return SourceOptions.parse(base | {k.replace("_", "."): v for k, v in options.items()})


def refused(match: str, **options: str) -> str:
    with pytest.raises(ValueError, match=match) as info:
        parse(**options)
    message = str(info.value)
    for secret in (SECRET, "s3cr", KEY_SECRET, "wrong-pass"):
        assert secret not in message, message
    return message


def sasl_ssl(certs: Certs, **more: str) -> dict[str, str]:
    return {
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_jaas_config": SCRAM_JAAS,
        "kafka_ssl_truststore_location": str(certs.ca),
        "kafka_ssl_truststore_type": "PEM",
    } | more


# --- the JAAS line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        SCRAM_JAAS,
        # PLAIN's module, options in another order, Databricks' shaded package, no spaces
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'password="s3cr=t;\\"pw" username="alice";',
        "kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule REQUIRED "
        'username=alice password="s3cr=t;\\"pw" ;  ',
        "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
        '  username="alice"\n  password="s3cr=t;\\"pw"\n  tokenauth=false;',
    ],
)
def test_jaas_line_gives_username_and_password(line: str) -> None:
    assert parse_jaas(line) == ("alice", SECRET)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "login module org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
            "is not supported",
        ),
        (
            'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true principal="k";',
            "Krb5LoginModule is not supported",
        ),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice";',
            "gives no password",
        ),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required password="x";',
            "gives no username",
        ),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
            'password="s3cr=t;\\"pw"',
            "must end with ';'",
        ),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule username="a" password="b";',
            "control flag",
        ),
        ('username="alice" password="s3cr=t;\\"pw";', "must start with a login module"),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" '
            'password="s3cr=t;\\"pw"; org.apache.kafka.common.security.plain.PlainLoginModule '
            "required;",
            "exactly one login module",
        ),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" '
            'password="s3cr=t;\\"pw" tokenauth=true;',
            "delegation tokens",
        ),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required password="s3cr',
            "cannot be parsed",
        ),
    ],
)
def test_bad_jaas_lines_are_refused_without_their_secrets(line: str, match: str) -> None:
    options = {
        "kafka_security_protocol": "SASL_PLAINTEXT",
        "kafka_sasl_mechanism": "SCRAM-SHA-256",
        "kafka_sasl_jaas_config": line,
    }
    refused(match, **options)


# --- protocols and mechanisms ----------------------------------------------------------------


def test_sasl_ssl_scram_maps_onto_aiokafka_arguments(certs: Certs) -> None:
    opts = parse(**sasl_ssl(certs))
    assert opts.security == Security(
        protocol="SASL_SSL",
        mechanism="SCRAM-SHA-512",
        username="alice",
        password=SECRET,
        truststore=str(certs.ca),
    )
    args = opts.client_args()
    context = args.pop("ssl_context")
    assert args == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SECRET,
    }
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "kgroupd test CA"),),)
    ]  # the truststore's CA only, not the system's
    assert opts.client_args()["ssl_context"] is not context  # built where it is used


def test_plaintext_by_default_and_sasl_plaintext_plain() -> None:
    assert parse().client_args() == {"security_protocol": "PLAINTEXT"}
    opts = parse(
        kafka_security_protocol="sasl_plaintext",
        kafka_sasl_mechanism="PLAIN",
        kafka_sasl_jaas_config=SCRAM_JAAS.replace(
            "scram.ScramLoginModule", "plain.PlainLoginModule"
        ),
        kafka_request_timeout_ms="15000",
    )
    assert opts.client_args() == {
        "request_timeout_ms": 15000,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SECRET,
    }


def test_unknown_protocols_and_mechanisms_are_refused(certs: Certs) -> None:
    refused("kafka.security.protocol must be one of", kafka_security_protocol="TLS")
    jaas = {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_jaas_config": SCRAM_JAAS}
    refused("mechanism 'OAUTHBEARER' is not supported", kafka_sasl_mechanism="OAUTHBEARER", **jaas)
    refused("GSSAPI is Kafka's default when it is not set", **jaas)  # no mechanism given
    refused(
        "kafka.sasl.jaas.config is required with kafka.sasl.mechanism PLAIN",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="PLAIN",
    )
    # settings for a protocol not in use would be ignored: refused instead
    refused(
        "kafka.sasl.jaas.config, kafka.sasl.mechanism need kafka.security.protocol "
        "SASL_PLAINTEXT or SASL_SSL",
        kafka_security_protocol="SSL",
        kafka_sasl_mechanism="PLAIN",
        kafka_sasl_jaas_config=SCRAM_JAAS,
    )
    refused(
        "kafka.ssl.truststore.location need kafka.security.protocol SSL or SASL_SSL",
        kafka_ssl_truststore_location=str(certs.ca),
    )
    refused(
        "'kafka.ssl.protocol' is not supported",
        kafka_security_protocol="SSL",
        kafka_ssl_protocol="TLSv1.3",
    )


# --- trust- and keystores --------------------------------------------------------------------


def test_jks_and_pkcs12_stores_are_refused_with_how_to_make_pem(certs: Certs) -> None:
    jks = str(certs.ca.parent / "truststore.jks")
    message = refused(
        r"kafka.ssl.truststore.type is JKS \(Kafka's default\): Python's ssl module cannot "
        "read JKS",
        kafka_security_protocol="SSL",
        kafka_ssl_truststore_location=jks,
    )
    assert "set kafka.ssl.truststore.type=PEM" in message and "keytool -exportcert" in message
    refused(
        "kafka.ssl.keystore.type is PKCS12: Python's ssl module cannot read PKCS12 stores; "
        "convert the keystore to PEM",
        kafka_security_protocol="SSL",
        kafka_ssl_keystore_location=jks,
        kafka_ssl_keystore_type="PKCS12",
    )
    refused(
        "kafka.ssl.truststore.password is not supported",
        kafka_security_protocol="SSL",
        kafka_ssl_truststore_location=str(certs.ca),
        kafka_ssl_truststore_type="PEM",
        kafka_ssl_truststore_password="s3cr",
    )
    # a store said to be PEM that is not
    binary = certs.ca.parent / "binary.jks"
    binary.write_bytes(b"\xfe\xed\xfe\xed" + bytes(200))
    refused(
        "holds no PEM certificate",
        kafka_security_protocol="SSL",
        kafka_ssl_truststore_location=str(binary),
        kafka_ssl_truststore_type="PEM",
    )
    refused(
        "kafka.ssl.truststore.location: no file",
        kafka_security_protocol="SSL",
        kafka_ssl_truststore_location=str(certs.ca.parent / "absent.pem"),
        kafka_ssl_truststore_type="pem",
    )


def test_pem_keystore_with_an_encrypted_key(
    certs: Certs, keystore: Path, encrypted_keystore: Path
) -> None:
    tls = {
        "kafka_security_protocol": "SSL",
        "kafka_ssl_truststore_location": str(certs.ca),
        "kafka_ssl_truststore_type": "PEM",
        "kafka_ssl_keystore_type": "PEM",
    }
    opts = parse(**tls, kafka_ssl_keystore_location=str(keystore))
    assert opts.security.keystore == str(keystore) and opts.security.key_password is None
    encrypted = str(encrypted_keystore)
    opts = parse(**tls, kafka_ssl_keystore_location=encrypted, kafka_ssl_key_password=KEY_SECRET)
    assert opts.security.key_password == KEY_SECRET
    assert isinstance(opts.client_args()["ssl_context"], ssl.SSLContext)
    refused(
        "its private key is encrypted; set kafka.ssl.key.password",
        **tls,
        kafka_ssl_keystore_location=encrypted,
    )
    refused(
        "kafka.ssl.key.password does not decrypt its private key",
        **tls,
        kafka_ssl_keystore_location=encrypted,
        kafka_ssl_key_password="wrong-pass",
    )
    refused("holds no PEM private key", **tls, kafka_ssl_keystore_location=str(certs.client_cert))
    refused(
        "kafka.ssl.key.password needs kafka.ssl.keystore.location",
        **tls,
        kafka_ssl_key_password=KEY_SECRET,
    )


def test_endpoint_identification_algorithm(certs: Certs) -> None:
    tls = {
        "kafka_security_protocol": "SSL",
        "kafka_ssl_truststore_location": str(certs.ca),
        "kafka_ssl_truststore_type": "PEM",
    }
    off = parse(**tls, kafka_ssl_endpoint_identification_algorithm="")
    assert not off.security.check_hostname
    context = off.client_args()["ssl_context"]
    assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert parse(**tls, kafka_ssl_endpoint_identification_algorithm="HTTPS").security.check_hostname
    refused(
        "endpoint.identification.algorithm must be https",
        **tls,
        kafka_ssl_endpoint_identification_algorithm="ldaps",
    )


# --- to the executors ------------------------------------------------------------------------


def test_options_pickle_to_executors_and_keep_secrets_out_of_repr(
    certs: Certs, encrypted_keystore: Path
) -> None:
    opts = parse(
        **sasl_ssl(certs),
        kafka_ssl_keystore_location=str(encrypted_keystore),
        kafka_ssl_keystore_type="PEM",
        kafka_ssl_key_password=KEY_SECRET,
    )
    again: Any = pickle.loads(pickle.dumps(KgroupdStreamReader(opts)))
    assert again.opts == opts
    assert isinstance(again.opts.client_args()["ssl_context"], ssl.SSLContext)
    for text in (repr(opts), str(opts), repr(opts.security)):
        assert "s3cr" not in text and KEY_SECRET not in text, text
        assert "alice" in text  # the user name is not a secret
