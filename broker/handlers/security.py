"""SaslHandshake v0-v1, SaslAuthenticate v0-v2 (the connection's ``SaslSession`` does the
work), and the SCRAM credential admin APIs DescribeUserScramCredentials v0 and
AlterUserScramCredentials v0, with Kafka's per-user errors."""

from __future__ import annotations

from collections import Counter

from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.acls import CLUSTER_NAME
from kgroupd.broker.security.credentials import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MECHANISM_NAMES,
    from_salted_password,
)
from kgroupd.broker.security.rules import CLUSTER_ALTER
from kgroupd.protocol.errors import ErrorCode

MIN_ITERATIONS = 4096


@handler(17)
def handle_sasl_handshake(ctx: RequestContext, req: Fields) -> Fields:
    session = ctx.sasl
    if session is None:  # not a SASL listener
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": []}
    code = session.handshake(req["mechanism"] or "", ctx.api_version)
    if code is not ErrorCode.NONE:
        ctx.log.warning("sasl_handshake_refused", mechanism=req["mechanism"], error=code.name)
    return {"error_code": int(code), "mechanisms": list(session.enabled)}


@handler(36)
def handle_sasl_authenticate(ctx: RequestContext, req: Fields) -> Fields:
    session = ctx.sasl
    if session is None:
        return {
            "error_code": int(ErrorCode.ILLEGAL_SASL_STATE),
            "error_message": "this listener does not use SASL",
            "auth_bytes": b"",
        }
    answer = session.authenticate(req["auth_bytes"] or b"")
    if answer.error is not ErrorCode.NONE:
        ctx.log.warning(
            "sasl_authentication_failed",
            mechanism=session.mechanism,
            error=answer.error.name,
            reason=answer.message,
        )
    return {
        "error_code": int(answer.error),
        "error_message": answer.message,
        "auth_bytes": answer.token,
        "session_lifetime_ms": answer.session_lifetime_ms,
    }


def _duplicates(names: list[str]) -> set[str]:
    return {n for n, c in Counter(names).items() if c > 1}


@handler(50)
def handle_describe_user_scram_credentials(ctx: RequestContext, req: Fields) -> Fields:
    store = ctx.broker.credentials
    asked = [u["name"] for u in req["users"] or []]
    twice = _duplicates(asked)
    results = []
    for user in dict.fromkeys(asked) if asked else sorted(store.users):
        creds = store.users.get(user) or {}
        code, message = ErrorCode.NONE, None
        if user in twice:
            code = ErrorCode.DUPLICATE_RESOURCE
            message = f"Cannot describe SCRAM credentials for the same user twice: {user}"
        elif not creds:
            code = ErrorCode.RESOURCE_NOT_FOUND
            message = f"Attempt to describe a user credential that does not exist: {user}"
        infos = [
            {"mechanism": MECHANISM_IDS[m], "iterations": c.iterations}
            for m, c in sorted(creds.items())
        ]
        results.append(
            {
                "user": user,
                "error_code": int(code),
                "error_message": message,
                "credential_infos": infos if code is ErrorCode.NONE else [],
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


Refusal = tuple[ErrorCode, str]


def _refusal(ctx: RequestContext, change: Fields, upsert: bool) -> Refusal | None:
    """Why Kafka would refuse one deletion or upsertion, or None."""
    mechanism = MECHANISM_NAMES.get(change["mechanism"])
    if not change["name"]:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if not upsert:
        if ctx.broker.credentials.scram(mechanism, change["name"]) is None:
            return (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        return None
    if change["iterations"] < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if change["iterations"] > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not change["salt"] or not change["salted_password"]:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password are required"
    return None


@handler(51)
def handle_alter_user_scram_credentials(ctx: RequestContext, req: Fields) -> Fields:
    """Every change of a user is checked first; a user with any refused change gets that
    error and none of its changes is made (as Kafka answers per user)."""
    store = ctx.broker.credentials
    changes = [(d, False) for d in req["deletions"] or []]
    changes += [(u, True) for u in req["upsertions"] or []]
    errors: dict[str, Refusal] = {}
    if ctx.denies(CLUSTER_ALTER, CLUSTER_NAME):
        denied = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        errors = {(c["name"] or ""): denied for c, _ in changes}
    twice = Counter((c["name"], c["mechanism"]) for c, _ in changes)
    for change, upsert in changes:
        user = change["name"] or ""
        if twice[(change["name"], change["mechanism"])] > 1:
            errors.setdefault(
                user,
                (
                    ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                ),
            )
        refusal = _refusal(ctx, change, upsert)
        if refusal is not None:
            errors.setdefault(user, refusal)
    changed = sorted({c["name"] for c, _ in changes if (c["name"] or "") not in errors})
    for change, upsert in changes:
        if change["name"] not in changed:
            continue
        mechanism = MECHANISM_NAMES[change["mechanism"]]
        if upsert:
            cred = from_salted_password(
                mechanism, change["salt"], change["salted_password"], change["iterations"]
            )
            store.upsert(change["name"], mechanism, cred)
        else:
            store.delete(change["name"], mechanism)
    if changed:
        store.save()
        ctx.log.info("scram_credentials_altered", users=changed)
    users = dict.fromkeys((c["name"] or "") for c, _ in changes)
    results = []
    for user in users:
        code, message = errors.get(user, (ErrorCode.NONE, None))
        results.append({"user": user, "error_code": int(code), "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
