"""kgroupd's PySpark side: a streaming source for Spark (``kgroupd.pipeline.source``), a reference
streaming job (``python -m kgroupd.pipeline``) and its demo producer (``python -m
kgroupd.pipeline.demo_producer``). Needs the ``spark`` extra: ``pip install 'kgroupd[spark]'``."""
