"""Delegation tokens (KIP-48): CreateDelegationToken v1-v3, RenewDelegationToken v1-v2,
ExpireDelegationToken v1-v2, DescribeDelegationToken v1-v3, answered as a Kafka 4.3 broker
with its default config answers them: delegation tokens are not enabled (no
``delegation.token.secret.key``), so no token is ever made.

As Kafka's KafkaApis does, a token request over a connection that cannot carry one (PLAINTEXT,
or TLS without a client certificate: the principal is ``User:ANONYMOUS``) is
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, its timestamps -1. Over SASL or mutual TLS, Create
first checks what the broker checks before forwarding to the controller (CREATE_TOKENS on
another owner, under ``--authorizer acl``: DELEGATION_TOKEN_AUTHORIZATION_FAILED; a renewer
that is not a ``User``: INVALID_PRINCIPAL_TYPE); then every one of them is
DELEGATION_TOKEN_AUTH_DISABLED, with the fields the controller (Create, Renew, Expire) or the
broker (Describe) leave at their defaults.
"""

from __future__ import annotations

from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import ANONYMOUS
from kgroupd.broker.security.rules import USER_CREATE_TOKENS
from kgroupd.protocol.errors import ErrorCode

USER_TYPE = "User"
NOT_ALLOWED = int(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
DISABLED = int(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)


def allows_tokens(ctx: RequestContext) -> bool:
    """Kafka's ``allowTokenRequests``: not over PLAINTEXT nor one-way TLS (no token
    authentication exists here)."""
    return ctx.sasl is not None or ctx.principal != ANONYMOUS


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


@handler(38)
def handle_create_delegation_token(ctx: RequestContext, req: Fields) -> Fields:
    requester = ctx.principal
    named = req["owner_principal_name"]
    owner = f"{req['owner_principal_type']}:{named}" if named else requester
    owner_type, owner_name = _split(owner)
    requester_type, requester_name = _split(requester)
    out: Fields = {
        "principal_type": owner_type,
        "principal_name": owner_name,
        "token_requester_principal_type": requester_type,
        "token_requester_principal_name": requester_name,
        "hmac": b"",
        "token_id": "",
    }
    if not allows_tokens(ctx):
        error = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        stamps = -1
    elif owner != requester and ctx.denies(USER_CREATE_TOKENS, owner):
        error = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
        stamps = -1
    elif any(r["principal_type"] != USER_TYPE for r in req["renewers"]):
        error = ErrorCode.INVALID_PRINCIPAL_TYPE
        stamps = -1
    else:  # the controller's answer: its timestamps are left at 0
        error, stamps = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, 0
    ctx.log.info("delegation_token_refused", api_key=38, error=error.name)
    out["error_code"] = int(error)
    for field in ("issue_timestamp_ms", "expiry_timestamp_ms", "max_timestamp_ms"):
        out[field] = stamps
    return out


@handler(39)
def handle_renew_delegation_token(ctx: RequestContext, req: Fields) -> Fields:
    return _renew_or_expire(ctx, 39)


@handler(40)
def handle_expire_delegation_token(ctx: RequestContext, req: Fields) -> Fields:
    return _renew_or_expire(ctx, 40)


def _renew_or_expire(ctx: RequestContext, api_key: int) -> Fields:
    if not allows_tokens(ctx):
        error, expiry = NOT_ALLOWED, -1
    else:  # the controller's answer: the expiry left at 0
        error, expiry = DISABLED, 0
    ctx.log.info("delegation_token_refused", api_key=api_key, error=ErrorCode(error).name)
    return {"error_code": error, "expiry_timestamp_ms": expiry}


@handler(41)
def handle_describe_delegation_token(ctx: RequestContext, req: Fields) -> Fields:
    error = DISABLED if allows_tokens(ctx) else NOT_ALLOWED
    return {"error_code": error, "tokens": []}
