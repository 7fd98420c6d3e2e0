"""kafka-python classes for the messages its release ships no JSON for (the KIP-848, KIP-932,
KIP-714, delegation token and KRaft voter APIs): its own JSON loader fed with the message JSON
inside kafka-clients-4.3.0.jar (fetched by ``tests.support.java``, cached under ``.cache/``)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import os
import sys
import warnings
import zipfile
from typing import Any

from tests.support.java import CACHE, KAFKA_CLIENTS_VERSION, JavaSetupError, _jars

MESSAGES = {
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    64: "UnregisterBroker",
    80: "AddRaftVoter",
    81: "RemoveRaftVoter",
    76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe",
    78: "ShareFetch",
    79: "ShareAcknowledge",
    90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets",
    92: "DeleteShareGroupOffsets",
}
# The cached package is named after the messages it holds, so a run with more messages
# never picks up an older, smaller copy.
PACKAGE = (
    "kgroupd_kafka_json_"
    + hashlib.sha256(" ".join(sorted(MESSAGES.values())).encode()).hexdigest()[:8]
)


def _json_package() -> Any:
    root = CACHE / "message-json"
    pkg = root / PACKAGE
    if not (pkg / "__init__.py").exists():
        jar = next(
            j for j in _jars(CACHE) if j.name == f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar"
        )
        tmp = root / f"{PACKAGE}.tmp{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(jar) as zf:
            for name in MESSAGES.values():
                for kind in ("Request", "Response"):
                    data = zf.read(f"common/message/{name}{kind}.json")
                    (tmp / f"{name}{kind}.json").write_bytes(data)
        (tmp / "__init__.py").write_text("")
        with contextlib.suppress(OSError):  # another process may have published it first
            tmp.rename(pkg)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(PACKAGE)


@functools.cache
def extra_kp_classes() -> dict[int, tuple[Any, Any]]:
    """``{api_key: (request class, response class)}``; empty if the jar cannot be had
    (outside CI: the tests that need them skip; under CI=true, fail)."""
    try:
        package = _json_package()
    except (JavaSetupError, OSError, StopIteration) as exc:
        if os.environ.get("CI") == "true":
            raise
        warnings.warn(f"no kafka-clients jar for the KIP-848 message JSON: {exc}", stacklevel=1)
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.protocol.api_message import ApiMessage

        out: dict[int, tuple[Any, Any]] = {}
        for key, name in MESSAGES.items():
            classes = [
                type(f"{name}{kind}", (ApiMessage,), {}, load_json=package)
                for kind in ("Request", "Response")
            ]
            out[key] = (classes[0], classes[1])
    return out


__all__ = ["extra_kp_classes", "jar_message_json"]


@functools.cache
def jar_message_json(name: str) -> dict[str, Any]:
    """One message definition (``"JoinGroupRequest"``) from kafka-clients-4.3.0.jar."""
    import json
    import re

    wanted = f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar"
    jar = next(j for j in _jars(CACHE) if j.name == wanted)
    with zipfile.ZipFile(jar) as zf:
        text = zf.read(f"common/message/{name}.json").decode()
    return dict(json.loads(re.sub(r"(?m)^\s*//.*$", "", text)))
