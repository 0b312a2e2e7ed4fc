// kafkajs round trip for the interop suite: produce keyed records with headers, read them
// back through a consumer group, commit, and print one JSON document (records, then the
// group's committed offsets), the shape interop/ecosystem/clients.py reads for every client.
// Usage: node roundtrip.js BOOTSTRAP TOPIC GROUP COUNT
'use strict';
const { Kafka, logLevel } = require('kafkajs');

const DEADLINE_MS = 60000;

async function main() {
  const [bootstrap, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const kafka = new Kafka({ clientId: 'tidelog-interop', brokers: [bootstrap], logLevel: logLevel.NOTHING });

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (let i = 0; i < count; i++) {
    await producer.send({
      topic,
      acks: -1,
      messages: [{ key: `key-${i}`, value: `value-${i}`, headers: { seq: String(i), client: 'kafkajs' } }],
    });
  }
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const records = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      records.push({
        partition,
        offset: Number(message.offset),
        key: message.key.toString(),
        value: message.value.toString(),
        headers: Object.entries(message.headers).map(([k, v]) => [k, v.toString()]),
      });
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
      if (records.length >= count) resolveDone();
    },
  });
  let timer;
  await Promise.race([done, new Promise((resolve) => { timer = setTimeout(resolve, DEADLINE_MS); })]);
  clearTimeout(timer); // a pending timer would keep the process alive to the deadline
  await consumer.disconnect();

  const admin = kafka.admin();
  await admin.connect();
  const [entry] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
  await admin.disconnect();
  const committed = {};
  for (const p of entry.partitions) {
    if (Number(p.offset) >= 0) committed[String(p.partition)] = Number(p.offset);
  }
  process.stdout.write(JSON.stringify({ records, committed }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
