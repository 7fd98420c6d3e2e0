"""Security as Kafka does it: TLS listeners (``tls``), SASL PLAIN and SCRAM (``sasl``) with
SCRAM credentials (``credentials``), and their settings (``options``)."""
