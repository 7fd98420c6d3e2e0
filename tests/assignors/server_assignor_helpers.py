"""Shared builders, checks and hypothesis strategies for the KIP-848 server assignor tests."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping

from hypothesis import strategies as st

from kgroupd.assignors import ServerAssignment, ServerMember, TopicKey, uniform_assign

Parts = Mapping[TopicKey, Iterable[int]]


def kafka_uuid(text: str) -> uuid.UUID:
    """A Kafka ``Uuid.fromString`` (URL-safe base64 of the 16 bytes)."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


T1 = kafka_uuid("T1-A4s3VTwiI5CTbEp6POw")
T2 = kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe")
T3 = kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa")
T4 = kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa")


def mem(
    member_id: str,
    topics: Iterable[TopicKey],
    assigned: Parts | None = None,
    instance_id: str | None = None,
) -> ServerMember:
    owned = {t: frozenset(p) for t, p in (assigned or {}).items()}
    return ServerMember(member_id, instance_id, None, frozenset(topics), owned)


def group(*members: ServerMember) -> dict[str, ServerMember]:
    return {m.member_id: m for m in members}


def plain(result: ServerAssignment) -> dict[str, dict[TopicKey, set[int]]]:
    return {m: {t: set(p) for t, p in by_topic.items()} for m, by_topic in result.items()}


def expect(**members: Parts) -> dict[str, dict[TopicKey, set[int]]]:
    return {m: {t: set(p) for t, p in by_topic.items()} for m, by_topic in members.items()}


def feed_back(
    members: Mapping[str, ServerMember], result: ServerAssignment
) -> dict[str, ServerMember]:
    """The next round's members: same subscriptions, the result as current target."""
    return {
        m: ServerMember(s.member_id, s.instance_id, s.rack_id, s.subscribed, result[m])
        for m, s in members.items()
    }


def counts(result: ServerAssignment) -> dict[str, int]:
    return {m: sum(len(p) for p in by_topic.values()) for m, by_topic in result.items()}


def check_valid(
    members: Mapping[str, ServerMember],
    partitions: Mapping[TopicKey, int],
    result: ServerAssignment,
) -> None:
    """Every member has an entry; each partition of each subscribed topic is assigned exactly
    once, to a subscriber; nothing else is assigned; no empty topic entries."""
    assert set(result) == set(members)
    seen: set[tuple[TopicKey, int]] = set()
    for member_id, by_topic in result.items():
        for topic, parts in by_topic.items():
            assert parts, f"empty entry for {topic} in {member_id}"
            assert topic in members[member_id].subscribed, f"{topic} to non-subscriber {member_id}"
            for p in parts:
                assert 0 <= p < partitions[topic]
                assert (topic, p) not in seen, f"{(topic, p)} assigned twice"
                seen.add((topic, p))
    wanted = {t for m in members.values() for t in m.subscribed if t in partitions}
    assert seen == {(t, p) for t in wanted for p in range(partitions[t])}


def valid_owned(
    members: Mapping[str, ServerMember], partitions: Mapping[TopicKey, int]
) -> dict[str, int]:
    """How many current partitions each member can keep: subscribed, existing, and not
    already claimed by a member earlier in member-id order."""
    taken: set[tuple[TopicKey, int]] = set()
    out: dict[str, int] = {}
    for member_id in sorted(members):
        member = members[member_id]
        n = 0
        for topic, parts in member.assigned.items():
            if topic not in member.subscribed or topic not in partitions:
                continue
            for p in parts:
                if 0 <= p < partitions[topic] and (topic, p) not in taken:
                    taken.add((topic, p))
                    n += 1
        out[member_id] = n
    return out


def moved(before: Mapping[str, ServerMember], result: ServerAssignment) -> int:
    """Partitions a member held (validly) before and does not hold after."""
    n = 0
    for member_id, member in before.items():
        for topic, parts in member.assigned.items():
            n += len(set(parts) - result.get(member_id, {}).get(topic, frozenset()))
    return n


TOPICS = [uuid.UUID(int=i * 0x0123456789ABCDEF0123456789ABCDEF % (1 << 128)) for i in range(1, 6)]
GONE = uuid.UUID(int=0xDEAD)  # a topic that no longer exists


@st.composite
def groups(
    draw: st.DrawFn, homogeneous: bool | None = None, max_members: int = 7
) -> tuple[dict[str, ServerMember], dict[TopicKey, int]]:
    """A group with arbitrary current assignments, including stale ones: partitions beyond
    a topic's count, a deleted topic, unsubscribed topics, partitions claimed twice."""
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    partitions = {t: draw(st.integers(0, 9)) for t in topics}
    n = draw(st.integers(1, max_members))
    ids = [f"m{i}" for i in draw(st.permutations(range(n)))]
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    common = frozenset(draw(st.lists(st.sampled_from(topics), unique=True)))
    members = {}
    for member_id in ids:
        subs = (
            common
            if homogeneous
            else frozenset(draw(st.lists(st.sampled_from(topics), unique=True)))
        )
        assigned = {}
        for topic in [*topics, GONE]:
            if draw(st.integers(0, 2)) == 0:
                assigned[topic] = frozenset(draw(st.lists(st.integers(0, 11), max_size=6)))
        instance = draw(st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3", "i4"])))
        members[member_id] = mem(member_id, subs, assigned, instance)
    return members, partitions


@st.composite
def stable_groups(
    draw: st.DrawFn, homogeneous: bool | None = None
) -> tuple[dict[str, ServerMember], dict[TopicKey, int]]:
    """A group whose current assignments are the assignor's own previous output."""
    members, partitions = draw(groups(homogeneous))
    return feed_back(members, uniform_assign(members, partitions)), partitions


def moved_valid(
    members: Mapping[str, ServerMember],
    partitions: Mapping[TopicKey, int],
    result: ServerAssignment,
) -> int:
    """Valid (kept-able) current partitions that the member no longer holds."""
    taken: set[tuple[TopicKey, int]] = set()
    n = 0
    for member_id in sorted(members):
        member = members[member_id]
        for topic, parts in member.assigned.items():
            if topic not in member.subscribed or topic not in partitions:
                continue
            for p in parts:
                if 0 <= p < partitions[topic] and (topic, p) not in taken:
                    taken.add((topic, p))
                    n += p not in result[member_id].get(topic, frozenset())
    return n


def locally_balanced(members: Mapping[str, ServerMember], result: ServerAssignment) -> bool:
    """No member holds a partition that a subscriber with two or more fewer could take."""
    sizes = counts(result)
    return all(
        sizes[holder] - sizes[other] <= 1
        for holder, by_topic in result.items()
        for topic in by_topic
        for other, member in members.items()
        if topic in member.subscribed
    )


@st.composite
def complete_assignments(draw: st.DrawFn) -> tuple[dict[str, ServerMember], dict[TopicKey, int]]:
    """A group whose current assignment gives each partition to a random subscriber."""
    members, partitions = draw(groups(homogeneous=False))
    held: dict[str, dict[TopicKey, set[int]]] = {m: {} for m in members}
    for topic, n in partitions.items():
        subscribers = sorted(m for m in members if topic in members[m].subscribed)
        for p in range(n if subscribers else 0):
            held[draw(st.sampled_from(subscribers))].setdefault(topic, set()).add(p)
    current = {m: {t: frozenset(p) for t, p in by_topic.items()} for m, by_topic in held.items()}
    return feed_back(members, current), partitions
