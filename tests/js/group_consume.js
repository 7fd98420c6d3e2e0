// Drives kafkajs consumers in one consumer group for tests/integration/test_groups_kafkajs.py.
//
//   node group_consume.js '{"brokers": ["127.0.0.1:9092"], "topic": "t", "group": "g",
//                           "members": 2}'
//
// Starts `members` consumers (autoCommit off, fromBeginning: without a committed offset a
// partition is read from offset 0) and prints one JSON object per line on stdout:
//   {"event": "join", "member": i, "memberId": "...", "leaderId": "...",
//    "partitions": [0, 2]}                       (each GROUP_JOIN, i.e. every completed rebalance)
//   {"event": "record", "member": i, "partition": p, "offset": o, "value": "..."}
//   {"event": "committed", "member": i, "offsets": {"p": next}}
//   {"event": "done"}
// A line "stop" on stdin makes every member commit the offset after the last record it
// consumed on each partition it still owns, disconnect (LeaveGroup), and the script exit 0.
// kafkajs' own log goes to stderr. Any failure exits 1 with {"event": "error"}.
"use strict";

const readline = require("readline");
const { Kafka, logLevel } = require("kafkajs");

const opts = JSON.parse(process.argv[2]);
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const kafka = new Kafka({
  clientId: "kgroupd-kafkajs-test",
  brokers: opts.brokers,
  logLevel: logLevel.WARN,
  retry: { initialRetryTime: 100, retries: 8 },
});

async function startMember(index) {
  const consumer = kafka.consumer({
    groupId: opts.group,
    sessionTimeout: 6000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 300,
    metadataMaxAge: 1000,
    maxWaitTimeInMs: 200,
    retry: { initialRetryTime: 100, retries: 8 },
  });
  const member = { index, consumer, owned: new Set(), next: new Map() };
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const partitions = (payload.memberAssignment[opts.topic] || []).slice().sort((a, b) => a - b);
    member.owned = new Set(partitions);
    emit({
      event: "join",
      member: index,
      memberId: payload.memberId,
      leaderId: payload.leaderId,
      partitions,
    });
  });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    emit({ event: "error", member: index, error: String(payload.error) });
    process.exit(1);
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [opts.topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      member.next.set(partition, BigInt(message.offset) + 1n);
      emit({
        event: "record",
        member: index,
        partition,
        offset: Number(message.offset),
        value: message.value.toString(),
      });
    },
  });
  return member;
}

async function stop(members) {
  for (const m of members) {
    const offsets = [...m.next]
      .filter(([partition]) => m.owned.has(partition))
      .map(([partition, next]) => ({ topic: opts.topic, partition, offset: next.toString() }));
    if (offsets.length) await m.consumer.commitOffsets(offsets);
    emit({
      event: "committed",
      member: m.index,
      offsets: Object.fromEntries(offsets.map((o) => [o.partition, Number(o.offset)])),
    });
  }
  for (const m of members) await m.consumer.disconnect();
  emit({ event: "done" });
}

async function main() {
  const members = [];
  for (let i = 0; i < opts.members; i++) members.push(await startMember(i));
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (line.trim() === "stop") {
      await stop(members);
      process.exit(0);
    }
  }
  // stdin closed without "stop": the test gave up; leave quietly.
  for (const m of members) await m.consumer.disconnect();
  process.exit(1);
}

main().catch((err) => {
  emit({ event: "error", error: String(err && err.stack ? err.stack : err) });
  process.exit(1);
});
