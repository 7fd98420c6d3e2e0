"""The per-partition metric families (``metrics.Later``) write their own text: it must be what
prometheus-client's ``generate_latest`` writes for the same samples, escaping included."""

from __future__ import annotations

from prometheus_client import generate_latest

from kgroupd.broker.http.listener import _Collected, _render
from kgroupd.broker.http.metrics import Later, _log_ends

ODD = ['quo"te', "back\\slash", "new\nline", "ünï", "", "__other__"]


def test_later_text_is_generate_latest_text() -> None:
    rows = [
        ([g, t, str(p)], v)
        for g in ODD
        for t in ("a", "b.c")
        for p, v in enumerate((0, 1, 2**63 - 1, 123456789012, -5))
    ]
    lag = Later(
        "kgroupd_consumergroup_lag",
        'Lag, "quoted"\\ and\nmore',
        ["group", "topic", "partition"],
        lambda: rows,
    )
    ends = Later(
        "kgroupd_log_end_offset",
        "The next offset of a partition",
        ["topic", "partition"],
        lambda: _log_ends([("a", [3, 0, 7]), ("__other__", [1]), ("__other__", [2, 5])]),
    )
    empty = Later("kgroupd_empty", "none", ["group"], lambda: [])
    families = [lag, ends, empty]
    assert _render(families) == generate_latest(_Collected(families))
    text = _render([ends]).decode()
    assert 'kgroupd_log_end_offset{partition="1",topic="__other__"} 5.0' in text
    assert 'kgroupd_log_end_offset{partition="0",topic="__other__"} 3.0' in text
