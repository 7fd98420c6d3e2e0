// Drives kafkajs consumers of one group for tests/integration/test_groups_new_partitions.py.
//
//   node new_partitions.js '{"brokers": ["127.0.0.1:9092"], "topic": "t", "group": "g",
//                            "members": 2}'
//
// Starts `members` consumers (metadataMaxAge 1000 ms, so a topic that gains partitions is
// noticed within about a second; autoCommit off; fromBeginning) and prints one JSON object
// per line on stdout:
//   {"event": "assigned", "member": "k0", "partitions": [0, 2]}   (each GROUP_JOIN)
//   {"event": "record", "member": "k0", "partition": p, "value": "..."}
//   {"event": "done"}
// A line "stop" on stdin makes every member disconnect (LeaveGroup) and the script exit 0.
// kafkajs' own log goes to stderr. Any failure exits 1 with {"event": "error"}.
"use strict";

const readline = require("readline");
const { Kafka, logLevel } = require("kafkajs");

const opts = JSON.parse(process.argv[2]);
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const kafka = new Kafka({
  clientId: "kgroupd-kafkajs-new-partitions",
  brokers: opts.brokers,
  logLevel: logLevel.WARN,
  retry: { initialRetryTime: 100, retries: 8 },
});

async function startMember(index) {
  const name = `k${index}`;
  const consumer = kafka.consumer({
    groupId: opts.group,
    sessionTimeout: 6000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 300,
    metadataMaxAge: 1000,
    maxWaitTimeInMs: 200,
    retry: { initialRetryTime: 100, retries: 8 },
  });
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const partitions = (payload.memberAssignment[opts.topic] || []).slice().sort((a, b) => a - b);
    emit({ event: "assigned", member: name, partitions });
  });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    emit({ event: "error", member: name, error: String(payload.error) });
    process.exit(1);
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [opts.topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      emit({ event: "record", member: name, partition, value: message.value.toString() });
    },
  });
  return consumer;
}

async function main() {
  const consumers = [];
  for (let i = 0; i < opts.members; i++) consumers.push(await startMember(i));
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (line.trim() === "stop") {
      for (const c of consumers) await c.disconnect();
      emit({ event: "done" });
      process.exit(0);
    }
  }
  // stdin closed without "stop": the test gave up; leave quietly.
  for (const c of consumers) await c.disconnect();
  process.exit(1);
}

main().catch((err) => {
  emit({ event: "error", error: String(err && err.stack ? err.stack : err) });
  process.exit(1);
});
