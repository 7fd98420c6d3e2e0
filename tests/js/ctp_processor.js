// kafkajs consume-transform-produce for tests/integration/test_transactions_eos.py, the same
// contract as tests/support/ctp_processor.py:
//
//   node ctp_processor.js BOOTSTRAP INPUT OUTPUT GROUP TXN_ID
//
// A group member (subscribed to INPUT, positions from GROUP's commits, readUncommitted false)
// writes "out-<value>" to the same partition of OUTPUT for every record of each batch and
// commits the batch's offsets inside the same transaction (sendOffsets). Prints
// "processed N" after every committed transaction; exits 0 once it has been in the group
// for 4 s with nothing new to read.
"use strict";

const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, input, output, group, txnId] = process.argv.slice(2);
const IDLE_MS = 4000;
const kafka = new Kafka({
  clientId: "kgroupd-kafkajs-ctp",
  brokers: [bootstrap],
  logLevel: logLevel.NOTHING,
  retry: { initialRetryTime: 100, retries: 8 },
});

async function main() {
  const producer = kafka.producer({ transactionalId: txnId, maxInFlightRequests: 1, idempotent: true });
  // a short session: the member a SIGKILL left behind is expelled in 6 s, not kafkajs's 30
  const consumer = kafka.consumer({
    groupId: group, readUncommitted: false, sessionTimeout: 6000, rebalanceTimeout: 6000,
    heartbeatInterval: 1000, maxBytesPerPartition: 4096,
  });
  await producer.connect();
  await consumer.connect();
  await consumer.subscribe({ topic: input, fromBeginning: true });
  let last = null;  // set once the member has joined
  consumer.on(consumer.events.GROUP_JOIN, () => { if (last === null) last = Date.now(); });
  let done = 0;
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch, heartbeat }) => {
      if (batch.messages.length === 0) return;
      const txn = await producer.transaction();
      try {
        await txn.send({
          topic: output,
          messages: batch.messages.map((m) => ({ value: `out-${m.value}`, partition: batch.partition })),
        });
        const next = (BigInt(batch.lastOffset()) + 1n).toString();
        await txn.sendOffsets({
          consumerGroupId: group,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }],
        });
        await txn.commit();
      } catch (e) {
        await txn.abort();
        throw e;
      }
      done += batch.messages.length;
      last = Date.now();
      process.stdout.write(`processed ${done}\n`);
      await heartbeat();
    },
  });
  while (last === null || Date.now() - last < IDLE_MS) await new Promise((r) => setTimeout(r, 200));
  await consumer.disconnect();
  await producer.disconnect();
}

main().then(() => process.exit(0), (e) => { process.stderr.write(`${e.stack}\n`); process.exit(1); });
