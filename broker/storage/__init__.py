"""Durable state under ``--data-dir``: coordinator record logs and snapshots, topic segments.

Layout::

    DATA_DIR/meta.json                      format version, cluster id, offsets partitions
    DATA_DIR/.lock                          held (flock) while a broker uses the directory
    DATA_DIR/coordinator/shard-NN-SEQ.log   records appended by shard NN since snapshot SEQ
    DATA_DIR/coordinator/shard-NN.snapshot  compacted state (latest record per key)
    DATA_DIR/topics.json                    topic names, partition counts, configs
    DATA_DIR/topics/NAME-P/BASEOFFSET.log   record batches of one partition, as produced
"""
