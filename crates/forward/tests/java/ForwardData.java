// Java-side data for tests/forward_edge.rs, written by the real Java client in ONE JVM (a JVM start costs
// seconds on the 2-core test machines):
//   * batches of every codec, as KafkaProducer builds them: several records per batch, null keys and values,
//     headers with duplicate keys, a null header value and a non-ASCII header key;
//   * interleaved transactions of two transactional producers, one committing and one aborting in each round,
//     with plain (non-transactional) records in between;
//   * DeleteRecords (the source offset a mirror needs disappears).
//
// Usage: java -cp '<kafka lib>/*' ForwardData.java <bootstrap> <op>...
//   codecs:<topic-prefix>:<records>      topics <prefix>-{none,gzip,snappy,lz4,zstd}, partition 0
//   txn:<topic>:<rounds>                 values "C:..." (committed), "A:..." (aborted), "P:..." (plain)
//   delete:<topic>:<partition>:<offset>  deletes the records below <offset>
// Exit code 0 = done; anything else = the exception on stderr.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ForwardData {
    private ForwardData() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        for (int i = 1; i < args.length; i++) {
            String[] op = args[i].split(":");
            switch (op[0]) {
                case "codecs":
                    codecs(bootstrap, op[1], Integer.parseInt(op[2]));
                    break;
                case "txn":
                    txn(bootstrap, op[1], Integer.parseInt(op[2]));
                    break;
                case "delete":
                    delete(bootstrap, op[1], Integer.parseInt(op[2]), Long.parseLong(op[3]));
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + args[i]);
            }
            System.out.println("done " + args[i]);
        }
    }

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("acks", "all");
        p.put("linger.ms", "50");
        p.put("batch.size", "65536");
        return p;
    }

    private static void codecs(String bootstrap, String prefix, int records) throws Exception {
        for (String codec : new String[] {"none", "gzip", "snappy", "lz4", "zstd"}) {
            Properties p = producerProps(bootstrap);
            p.put("compression.type", codec);
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < records; i++) {
                    byte[] key = i % 5 == 0 ? null : utf8("key-" + i);
                    byte[] value = i % 7 == 3 ? null : utf8(codec + "-value-" + i + "-" + "x".repeat(i % 50));
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(prefix + "-" + codec, 0, key, value);
                    if (i % 3 == 0) {
                        r.headers().add("h", utf8("1"));
                        r.headers().add("h", utf8("2"));
                        r.headers().add("nul", null);
                    }
                    if (i % 4 == 1) {
                        r.headers().add("ключ", utf8("v" + i));
                    }
                    sent.add(producer.send(r));
                    if (i % 40 == 39) {
                        producer.flush(); // several batches per topic
                    }
                }
                producer.flush();
                for (Future<RecordMetadata> f : sent) {
                    f.get();
                }
            }
        }
    }

    private static KafkaProducer<byte[], byte[]> transactional(String bootstrap, String id) {
        Properties p = producerProps(bootstrap);
        p.put("transactional.id", id);
        p.put("compression.type", "lz4");
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    private static void send(KafkaProducer<byte[], byte[]> producer, String topic, String value, int n) {
        for (int i = 0; i < n; i++) {
            producer.send(new ProducerRecord<>(topic, 0, utf8("k" + i), utf8(value + "-" + i)));
        }
        producer.flush(); // a batch of its own, interleaved with the other producer's
    }

    private static void txn(String bootstrap, String topic, int rounds) throws Exception {
        try (KafkaProducer<byte[], byte[]> a = transactional(bootstrap, topic + "-a");
                KafkaProducer<byte[], byte[]> b = transactional(bootstrap, topic + "-b");
                KafkaProducer<byte[], byte[]> plain = new KafkaProducer<>(producerProps(bootstrap))) {
            for (int r = 0; r < rounds; r++) {
                boolean aCommits = r % 2 == 0;
                String fa = aCommits ? "C" : "A";
                String fb = aCommits ? "A" : "C";
                a.beginTransaction();
                b.beginTransaction();
                send(a, topic, fa + ":a" + r + "x", 3);
                send(b, topic, fb + ":b" + r + "x", 3);
                plain.send(new ProducerRecord<>(topic, 0, null, utf8("P:" + r))).get();
                send(a, topic, fa + ":a" + r + "y", 2);
                send(b, topic, fb + ":b" + r + "y", 2);
                if (aCommits) {
                    a.commitTransaction();
                    b.abortTransaction();
                } else {
                    b.commitTransaction();
                    a.abortTransaction();
                }
            }
            plain.send(new ProducerRecord<>(topic, 0, null, utf8("P:end"))).get();
        }
    }

    private static void delete(String bootstrap, String topic, int partition, long offset) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            admin.deleteRecords(Map.of(new TopicPartition(topic, partition), RecordsToDelete.beforeOffset(offset)))
                    .all()
                    .get();
        }
    }
}
