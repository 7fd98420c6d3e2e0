// kafkajs transactions for tests/integration/test_transactions_clients.py.
//
//   node transactions.js '{"brokers": ["127.0.0.1:9092"], "mode": "commit-abort",
//                          "topics": {"ta": 3, "tb": 2}, "prefix": "js"}'
//
// mode "commit-abort": one transactional producer commits a transaction writing
// "<prefix>-c-<i>" to every partition of every topic, then aborts one writing
// "<prefix>-a-<i>" the same way; then two consumers (readUncommitted false and true) read
// every partition from the start. Prints {"committed": [...values], "uncommitted": [...]}.
// mode "fence": two producers with one transactional id; the first, fenced by the second's
// initialisation, tries to send and commit: prints {"error": "<kafkajs error type>"}.
"use strict";

const { Kafka, logLevel } = require("kafkajs");

const opts = JSON.parse(process.argv[2]);
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const kafka = new Kafka({
  clientId: "kgroupd-kafkajs-txn",
  brokers: opts.brokers,
  logLevel: logLevel.NOTHING,
  retry: { initialRetryTime: 100, retries: 8 },
});

function messages(topics, value) {
  const out = [];
  for (const [topic, count] of Object.entries(topics)) {
    for (let p = 0; p < count; p++) out.push({ topic, messages: [{ value: `${value}-${topic}-${p}`, partition: p }] });
  }
  return out;
}

async function readAll(topics, readUncommitted) {
  const consumer = kafka.consumer({ groupId: `${opts.prefix}-read-${readUncommitted}`, readUncommitted });
  await consumer.connect();
  for (const topic of Object.keys(topics)) await consumer.subscribe({ topic, fromBeginning: true });
  const values = [];
  let last = Date.now();
  await consumer.run({ eachMessage: async ({ message }) => { values.push(message.value.toString()); last = Date.now(); } });
  const start = Date.now();
  while (Date.now() - start < 20000 && (values.length === 0 || Date.now() - last < 2500)) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await consumer.disconnect();
  return values.sort();
}

async function commitAbort() {
  const producer = kafka.producer({ transactionalId: `${opts.prefix}-txn`, maxInFlightRequests: 1, idempotent: true });
  await producer.connect();
  let txn = await producer.transaction();
  for (const batch of messages(opts.topics, `${opts.prefix}-c`)) await txn.send(batch);
  await txn.commit();
  txn = await producer.transaction();
  for (const batch of messages(opts.topics, `${opts.prefix}-a`)) await txn.send(batch);
  await txn.abort();
  await producer.disconnect();
  const committed = await readAll(opts.topics, false);
  const uncommitted = await readAll(opts.topics, true);
  emit({ committed, uncommitted });
}

async function fence() {
  const make = () => kafka.producer({ transactionalId: `${opts.prefix}-zombie`, maxInFlightRequests: 1, idempotent: true });
  const first = make();
  await first.connect();
  const txn = await first.transaction();  // initialises the producer id
  const second = make();
  await second.connect();
  const txn2 = await second.transaction();  // fences the first
  try {
    await txn.send({ topic: Object.keys(opts.topics)[0], messages: [{ value: "zombie", partition: 0 }] });
    await txn.commit();
    emit({ error: null });
  } catch (e) {
    emit({ error: e.type || e.name, message: e.message });
  }
  await txn2.abort();
  await first.disconnect().catch(() => {});
  await second.disconnect();
}

(opts.mode === "fence" ? fence() : commitAbort()).then(
  () => process.exit(0),
  (e) => { emit({ event: "error", error: String(e && e.stack || e) }); process.exit(1); },
);
