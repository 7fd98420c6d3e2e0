"""Tests of a Kafka application against kgroupd's test controls (pytest, aiokafka)."""

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


def consumer(bootstrap: str, **settings: object) -> AIOKafkaConsumer:
    return AIOKafkaConsumer("orders", bootstrap_servers=bootstrap, group_id="billing", **settings)


async def test_a_crashed_consumers_partitions_move_at_once(kgroupd_broker):
    broker = kgroupd_broker(create_topics=["orders:2"], initial_rebalance_delay_ms=0)
    crashed = consumer(broker.bootstrap, group_instance_id="pod-1", session_timeout_ms=45_000)
    await crashed.start()
    await crashed.stop()  # a static member leaves no LeaveGroup: the group waits for it
    broker.controls.advance_clock(46_000)  # its 45 s session ends now
    live = consumer(broker.bootstrap, group_instance_id="pod-2")
    await live.start()  # joins at once instead of waiting 45 s for pod-1
    assert live.assignment() == {TopicPartition("orders", 0), TopicPartition("orders", 1)}
    await live.stop()


async def test_commits_survive_a_coordinator_failover(kgroupd_broker):
    broker = kgroupd_broker(nodes=3, create_topics=["orders:1"], initial_rebalance_delay_ms=0)
    bootstrap = broker.bootstrap_all  # every node, as a client of a real cluster is given
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    billing = consumer(bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await producer.start()
    await billing.start()
    await producer.send_and_wait("orders", b"first")
    assert (await billing.getone()).value == b"first"
    await billing.commit()
    coordinator = broker.controls.coordinator("billing")
    broker.controls.node_down(coordinator)  # its connections close; another node takes over
    await producer.send_and_wait("orders", b"second")
    assert (await billing.getone()).value == b"second"
    await billing.commit()  # to the new coordinator, found again through FindCoordinator
    broker.controls.node_up(coordinator)
    assert await billing.committed(TopicPartition("orders", 0)) == 2
    await billing.stop()
    await producer.stop()
