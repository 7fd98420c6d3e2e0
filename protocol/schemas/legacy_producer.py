"""InitProducerId (api_key 22) v1, missing from aiokafka 0.14.

aiokafka only has ``InitProducerIdRequest_v0`` (``InitProducerIdRequestStruct``
is a type alias of it).  v1 has the same wire shape as v0; the version bump
only signals that the client understands ``PRODUCER_FENCED`` vs
``INVALID_PRODUCER_EPOCH`` semantics.
"""

from __future__ import annotations

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.transaction import InitProducerIdRequest_v0, InitProducerIdResponse_v0


class InitProducerIdResponse_v1(Response):
    API_KEY = 22
    API_VERSION = 1
    # throttle_time_ms, error_code, producer_id (int64), producer_epoch (int16)
    SCHEMA = InitProducerIdResponse_v0.SCHEMA


class InitProducerIdRequest_v1(RequestStruct):
    API_KEY = 22
    API_VERSION = 1
    RESPONSE_TYPE = InitProducerIdResponse_v1
    # transactional_id (nullable string), transaction_timeout_ms (int32)
    SCHEMA = InitProducerIdRequest_v0.SCHEMA


MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    (22, 1): (InitProducerIdRequest_v1, InitProducerIdResponse_v1),
}
