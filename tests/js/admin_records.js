// kafkajs admin against kgroupd for tests/integration/test_admin_clients.py.
//
//   node admin_records.js '{"brokers": ["127.0.0.1:9092"], "topic": "t", "before": 5}'
//
// Deletes the records of partition 0 of the topic below offset "before" with
// admin.deleteTopicRecords, reads the partition's offsets back with fetchTopicOffsets, then a
// consumer of a new group with fromBeginning reads partition 0 and reports the first offset it
// got. Prints {"low": "...", "high": "...", "first": "..."}.
"use strict";

const { Kafka, logLevel } = require("kafkajs");

const opts = JSON.parse(process.argv[2]);
const kafka = new Kafka({
  clientId: "kgroupd-kafkajs-admin",
  brokers: opts.brokers,
  logLevel: logLevel.NOTHING,
  retry: { initialRetryTime: 100, retries: 8 },
});

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  // kafkajs' deleteTopicRecords finds leaders in metadata it does not load itself (against
  // Kafka too): fetchTopicOffsets loads it first
  await admin.fetchTopicOffsets(opts.topic);
  await admin.deleteTopicRecords({
    topic: opts.topic,
    partitions: [{ partition: 0, offset: String(opts.before) }],
  });
  const offsets = await admin.fetchTopicOffsets(opts.topic);
  await admin.disconnect();
  const p0 = offsets.find((o) => o.partition === 0);
  const consumer = kafka.consumer({ groupId: `${opts.topic}-after-delete` });
  await consumer.connect();
  await consumer.subscribe({ topic: opts.topic, fromBeginning: true });
  const first = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no record within 20 s")), 20000);
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        if (partition === 0) {
          clearTimeout(timer);
          resolve(message.offset);
        }
      },
    });
  });
  await consumer.disconnect();
  process.stdout.write(JSON.stringify({ low: p0.low, high: p0.high, first }) + "\n");
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stdout.write(JSON.stringify({ error: String(err && err.stack ? err.stack : err) }) + "\n");
    process.exit(1);
  },
);
