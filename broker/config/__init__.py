"""Every flag and ``KGROUPD_*`` variable of the broker, one module per area: ``settings``
(``BrokerConfig``, ``load_config``), ``groups``, ``http``, ``security``, ``storage``,
``cleaner``, ``listeners``, their value ``types`` and ``logging``'s set-up."""
