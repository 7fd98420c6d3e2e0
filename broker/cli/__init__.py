"""The ``kgroupd`` command (``main``): the broker, and the admin tools ``kgroupd groups ...``
and ``kgroupd topics ...`` (``tools``), which speak the Kafka protocol (``client``) to any
broker, kgroupd or Apache Kafka; the container's health check (``healthcheck``)."""
