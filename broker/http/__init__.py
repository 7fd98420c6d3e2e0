"""The HTTP side: the listener (``/healthz``, ``/readyz``, ``/metrics``), the Prometheus
collector, the JSON API, live group events and the live page (``web/``). Started only when
the broker serves HTTP, and imported only then."""
