// @platformatic/kafka round trip for the interop suite (issue 36): produce keyed records with
// headers (idempotent producer), read them back through a consumer group, commit each, and
// print one JSON document (records, then the group's committed offsets), the shape
// interop/ecosystem/clients.py reads for every client. The client speaks only flexible
// versions (Produce 9+, Fetch 15+ with topic ids, Metadata 12+).
// Usage: node platformatic.js BOOTSTRAP TOPIC GROUP COUNT
'use strict';
const { Producer, Consumer, stringSerializers, stringDeserializers } = require('@platformatic/kafka');

const DEADLINE_MS = 60000;

async function main() {
  const [bootstrap, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const base = { clientId: 'tidelog-interop', bootstrapBrokers: [bootstrap] };

  const producer = new Producer({ ...base, serializers: stringSerializers, idempotent: true, acks: -1 });
  for (let i = 0; i < count; i++) {
    await producer.send({
      messages: [{
        topic,
        key: `key-${i}`,
        value: `value-${i}`,
        headers: new Map([['seq', String(i)], ['client', 'platformatic-kafka']]),
      }],
    });
  }
  await producer.close();

  const consumer = new Consumer({ ...base, groupId: group, deserializers: stringDeserializers });
  const stream = await consumer.consume({
    topics: [topic], mode: 'committed', fallbackMode: 'earliest', autocommit: false,
    sessionTimeout: 10000, heartbeatInterval: 500,
  });
  const records = [];
  const deadline = setTimeout(() => stream.close(), DEADLINE_MS);
  for await (const message of stream) {
    records.push({
      partition: message.partition,
      offset: Number(message.offset),
      key: message.key,
      value: message.value,
      headers: [...message.headers.entries()].map(([k, v]) => [String(k), String(v)]),
    });
    await message.commit();
    if (records.length >= count) break;
  }
  clearTimeout(deadline);
  await stream.close();
  const committedOffsets = await consumer.listCommittedOffsets({ topics: [{ topic, partitions: [0, 1] }] });
  await consumer.close(true);

  const committed = {};
  (committedOffsets.get(topic) || []).forEach((offset, partition) => {
    if (Number(offset) >= 0) committed[String(partition)] = Number(offset);
  });
  process.stdout.write(JSON.stringify({ records, committed }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  if (err.errors) process.stderr.write(`${JSON.stringify(err.errors, null, 1)}\n`);
  process.exit(1);
});
