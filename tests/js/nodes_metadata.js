// Reads kgroupd's Metadata with several simulated nodes (--nodes) through kafkajs, for
// tests/integration/test_nodes.py:
//
//   node nodes_metadata.js '{"brokers": ["127.0.0.1:9092"], "topic": "t"}'
//
// Prints one JSON object on stdout: the brokers describeCluster lists, the controller, each
// partition's leader and replicas (fetchTopicMetadata), and the partitions a producer wrote
// one record to each (kafkajs sends each to its leader; a wrong leader would be refused).
// kafkajs' own log goes to stderr. Any failure exits 1 with {"error": "..."}.
"use strict";

const { Kafka, logLevel } = require("kafkajs");

const opts = JSON.parse(process.argv[2]);
const kafka = new Kafka({
  clientId: "kgroupd-kafkajs-nodes",
  brokers: opts.brokers,
  logLevel: logLevel.WARN,
  retry: { initialRetryTime: 100, retries: 3 },
});

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  const cluster = await admin.describeCluster();
  const meta = await admin.fetchTopicMetadata({ topics: [opts.topic] });
  await admin.disconnect();
  const partitions = meta.topics[0].partitions
    .map((p) => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr }))
    .sort((a, b) => a.partition - b.partition);
  const producer = kafka.producer();
  await producer.connect();
  const written = [];
  for (const p of partitions) {
    const [r] = await producer.send({
      topic: opts.topic,
      messages: [{ partition: p.partition, value: `to-${p.partition}` }],
    });
    written.push({ partition: r.partition, errorCode: r.errorCode, offset: r.baseOffset });
  }
  await producer.disconnect();
  process.stdout.write(
    JSON.stringify({
      brokers: cluster.brokers.map((b) => ({ nodeId: b.nodeId, host: b.host, port: b.port })),
      controller: cluster.controller,
      partitions,
      written,
    }) + "\n",
  );
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: String(e && e.stack ? e.stack : e) }) + "\n");
  process.exit(1);
});
