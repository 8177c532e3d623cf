// Strait bench: reads a whole topic and prints what it holds, so the harness can prove a mirror copied exactly the
// source records (no loss, no duplicates, no corruption) and not merely the right number of offsets.
//
// Usage: java ... RecordDigest <bootstrap> <topic> [read_uncommitted|read_committed]
// The isolation level defaults to read_uncommitted (the consumer's default); read_committed is for the target of an
// exactly-once mirror: its records of aborted transactions are skipped, and "end" is then the last stable offset
// (markers included), not a record count. Reads every partition from the beginning up to the end offset it had when the tool started, then prints one JSON
// line:
//   {"topic": T, "count": N, "bytes": B, "set": H, "set_ts": H,
//    "partitions": [{"end": E, "count": N, "seq": H, "seq_ts": H}, ...]}
// where each record hashes to 64 bits over (key, value, headers) (CRC32C and CRC32, both hardware-accelerated),
// seq = order-sensitive fold of the record hashes of one partition, set = order-insensitive sum over the whole topic
// (MirrorMaker 1 does not keep partitions, so only the multiset can match), *_ts = the same with the record
// timestamp mixed in, and bytes = key + value bytes. Hashes are hex strings.

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class RecordDigest {
    private static final long PRIME = 0x100000001B3L;

    private RecordDigest() {}

    public static void main(String[] args) {
        if (args.length != 2 && args.length != 3) {
            System.err.println("usage: RecordDigest <bootstrap> <topic> [read_uncommitted|read_committed]");
            System.exit(2);
        }
        String topic = args[1];
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        BenchClient.apply(props);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "strait-bench-digest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20000");
        props.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(16 << 20));
        props.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, String.valueOf(64 << 20));
        props.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, String.valueOf(4 << 20));
        if (args.length == 3) {
            props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args[2]);
        }
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(30));
            if (infos == null || infos.isEmpty()) {
                System.err.println("topic " + topic + " does not exist");
                System.exit(1);
            }
            int n = infos.size();
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < n; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps, Duration.ofSeconds(30));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long[] count = new long[n];
            long[] seq = new long[n];
            long[] seqTs = new long[n];
            long set = 0;
            long setTs = 0;
            long total = 0;
            long bytes = 0;
            CRC32C c1 = new CRC32C();
            CRC32 c2 = new CRC32();
            List<TopicPartition> open = new ArrayList<>();
            for (TopicPartition tp : tps) {
                if (ends.get(tp) > 0) {
                    open.add(tp);
                }
            }
            consumer.pause(diff(tps, open));
            long idleSince = System.currentTimeMillis();
            while (!open.isEmpty()) {
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(500));
                if (recs.isEmpty()) {
                    if (System.currentTimeMillis() - idleSince > 60_000) {
                        System.err.println("no records for 60 s while partitions " + open + " are below their end");
                        System.exit(1);
                    }
                } else {
                    idleSince = System.currentTimeMillis();
                }
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    int p = r.partition();
                    if (r.offset() >= ends.get(new TopicPartition(topic, p))) {
                        continue; // written after we started: not part of the snapshot
                    }
                    c1.reset();
                    c2.reset();
                    update(c1, c2, r.key());
                    update(c1, c2, r.value());
                    for (Header h : r.headers()) {
                        update(c1, c2, h.key().getBytes(java.nio.charset.StandardCharsets.UTF_8));
                        update(c1, c2, h.value());
                    }
                    long h = (c1.getValue() << 32) | c2.getValue();
                    long hts = mix(h ^ mix(r.timestamp()));
                    count[p]++;
                    seq[p] = seq[p] * PRIME ^ h;
                    seqTs[p] = seqTs[p] * PRIME ^ hts;
                    set += mix(h);
                    setTs += hts;
                    total++;
                    bytes += (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length);
                }
                List<TopicPartition> still = new ArrayList<>();
                for (TopicPartition tp : open) {
                    if (consumer.position(tp) < ends.get(tp)) {
                        still.add(tp);
                    }
                }
                if (still.size() != open.size()) {
                    consumer.pause(diff(open, still));
                    open = still;
                }
            }
            StringBuilder out = new StringBuilder();
            out.append("{\"topic\": \"").append(topic).append("\", \"count\": ").append(total)
                    .append(", \"bytes\": ").append(bytes)
                    .append(", \"set\": \"").append(Long.toHexString(set))
                    .append("\", \"set_ts\": \"").append(Long.toHexString(setTs)).append("\", \"partitions\": [");
            for (int p = 0; p < n; p++) {
                if (p > 0) {
                    out.append(", ");
                }
                out.append("{\"end\": ").append(ends.get(tps.get(p))).append(", \"count\": ").append(count[p])
                        .append(", \"seq\": \"").append(Long.toHexString(seq[p]))
                        .append("\", \"seq_ts\": \"").append(Long.toHexString(seqTs[p])).append("\"}");
            }
            System.out.println(out.append("]}"));
        }
    }

    private static List<TopicPartition> diff(List<TopicPartition> all, List<TopicPartition> keep) {
        List<TopicPartition> out = new ArrayList<>(all);
        out.removeAll(keep);
        return out;
    }

    // Length-prefixed so that (key "ab", value "c") and (key "a", value "bc") differ; null is length -1.
    private static void update(CRC32C c1, CRC32 c2, byte[] b) {
        byte[] len = ByteBuffer.allocate(4).putInt(b == null ? -1 : b.length).array();
        c1.update(len);
        c2.update(len);
        if (b != null) {
            c1.update(b);
            c2.update(b);
        }
    }

    // SplitMix64 finalizer: spreads the bits so that sums of hashes do not cancel out structurally.
    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }
}
