"""kgroupd's PySpark side: a streaming source for Spark (``pipeline.source``), a reference
streaming job (``python -m pipeline``) and its demo producer (``python -m
pipeline.demo_producer``). Needs the ``spark`` extra: ``pip install 'kgroupd[spark]'``."""
