// Strait bench, kill phase (benches/mirror/kills.py): a steady load on the source, and the referee that counts what
// reached the target, record by record, with Kafka's own producer and consumer.
//
// Usage: java -cp '<kafka 4.x lib>/*:<classes>' KillLoad <bootstrap> <command> [args]
//   produce <topic> <partitions> <rate/s> <seconds> <value bytes>
//       writes <rate> records/s for <seconds> s, record i to partition i % <partitions> explicitly (no partitioner),
//       seq = i / <partitions>: key "p-seq", value "p:seq:" padded with '.' to <value bytes> (acks=all, idempotent,
//       linger.ms=5, no compression; batch.size 64 KiB, 16 KiB above 256 partitions, buffer.memory room for two batches
//       per partition). Paced against the wall clock from the first send (it catches up after a stall, never runs
//       ahead). Prints "start <epoch ms>", "sent <epoch ms> <total>" about once a second, then
//       "done <epoch ms> <n0,n1,...>" (records per partition, all acknowledged); on stderr once a second its
//       buffer-pool wait and request latency ("producer <epoch ms> sent=... bufferpool-wait-time-ns-total=...").
//   watch <topic> <n0,n1,...> <interval ms>
//       a read_committed consumer reads every partition from the beginning and tracks which seqs it has seen; prints
//       "ready <epoch ms>", "progress <epoch ms> <distinct> <records>" about once a second and
//       "done <epoch ms> <distinct> <records>" once every partition p holds every seq below n_p; then exits 0.
//   count <topic> <read_committed|read_uncommitted>
//       reads every partition from the beginning to the end offset it had when the tool started and prints one JSON
//       line: {"isolation": I, "partitions": [{"records": N, "distinct": D, "max_seq": M, "alien": A,
//       "out_of_order": O}, ...]}: records read, distinct seqs among them, the highest seq, records whose value does
//       not name this partition, and first copies of a seq that arrived after a higher seq.
// Exit 0 on success, 1 on failure (reason on stderr), 2 on bad arguments.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KillLoad {
    private KillLoad() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            usage();
        }
        String bootstrap = args[0];
        List<String> rest = List.of(args).subList(2, args.length);
        switch (args[1]) {
            case "produce" -> {
                if (rest.size() != 5) {
                    usage();
                }
                produce(bootstrap, rest.get(0), Integer.parseInt(rest.get(1)), Double.parseDouble(rest.get(2)),
                        Double.parseDouble(rest.get(3)), Integer.parseInt(rest.get(4)));
            }
            case "watch" -> {
                if (rest.size() != 3) {
                    usage();
                }
                watch(bootstrap, rest.get(0), parse(rest.get(1)), Long.parseLong(rest.get(2)));
            }
            case "count" -> {
                if (rest.size() != 2) {
                    usage();
                }
                count(bootstrap, rest.get(0), rest.get(1));
            }
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: KillLoad <bootstrap> produce <topic> <partitions> <rate> <seconds> <value bytes>"
                + " | watch <topic> <n0,n1,...> <interval ms> | count <topic> <isolation>");
        System.exit(2);
    }

    private static long[] parse(String csv) {
        String[] parts = csv.split(",");
        long[] out = new long[parts.length];
        for (int i = 0; i < parts.length; i++) {
            out[i] = Long.parseLong(parts[i].trim());
        }
        return out;
    }

    private static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    // --- produce -------------------------------------------------------------------------------------------------

    private static void produce(String bootstrap, String topic, int partitions, double rate, double seconds,
            int valueBytes) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "strait-bench-kill-producer");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        // Every partition with a record waiting holds a whole batch.size buffer from buffer.memory: 1,000 partitions of
        // 64 KiB batches need 64 MiB, twice the default pool. Once a slow broker answer lets most partitions hold one,
        // send() blocks on the pool and the load collapses for tens of seconds (seen in the rebalance bench, where it
        // looked like a mirror pause). So: smaller batches for many partitions, and room for two per partition.
        int batch = partitions > 256 ? 16384 : 65536;
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(batch));
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(Math.max(32L << 20, 2L * partitions * batch)));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        long total = (long) (rate * seconds);
        long[] perPartition = new long[partitions];
        AtomicLong acked = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            long t0 = System.nanoTime();
            emit("start " + System.currentTimeMillis());
            long lastReport = t0;
            for (long i = 0; i < total; i++) {
                long due = t0 + (long) (i / rate * 1e9);
                long now;
                while ((now = System.nanoTime()) < due) {
                    Thread.sleep(0, 500_000);
                }
                if (now - lastReport >= 1_000_000_000L) {
                    lastReport = now;
                    emit("sent " + System.currentTimeMillis() + " " + i);
                    // on stderr (the tool's log): whether send() waited for buffer memory, and the broker's latency
                    System.err.println("producer " + System.currentTimeMillis() + " sent=" + i
                            + " bufferpool-wait-time-ns-total=" + metric(producer, "bufferpool-wait-time-ns-total")
                            + " buffer-available-bytes=" + metric(producer, "buffer-available-bytes")
                            + " request-latency-avg=" + metric(producer, "request-latency-avg")
                            + " request-latency-max=" + metric(producer, "request-latency-max"));
                }
                int p = (int) (i % partitions);
                long seq = i / partitions;
                perPartition[p]++;
                byte[] key = (p + "-" + seq).getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(topic, p, key, value(p, seq, valueBytes)), (md, e) -> {
                    if (e != null) {
                        failed.compareAndSet(null, e);
                    } else {
                        acked.incrementAndGet();
                    }
                });
                if (failed.get() != null) {
                    break;
                }
            }
            producer.flush();
        }
        if (failed.get() != null || acked.get() != total) {
            System.err.println("produce failed: " + acked.get() + " of " + total + " acknowledged: " + failed.get());
            System.exit(1);
        }
        StringBuilder sb = new StringBuilder();
        for (int p = 0; p < partitions; p++) {
            sb.append(p == 0 ? "" : ",").append(perPartition[p]);
        }
        emit("done " + System.currentTimeMillis() + " " + sb);
    }

    /** A producer-metrics value by name ("?" when absent). */
    private static String metric(KafkaProducer<?, ?> producer, String name) {
        for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> e
                : producer.metrics().entrySet()) {
            if (e.getKey().name().equals(name) && e.getKey().group().equals("producer-metrics")) {
                Object v = e.getValue().metricValue();
                return v instanceof Double d ? String.format("%.0f", d) : String.valueOf(v);
            }
        }
        return "?";
    }

    private static byte[] value(int p, long seq, int size) {
        byte[] head = (p + ":" + seq + ":").getBytes(StandardCharsets.UTF_8);
        byte[] out = new byte[Math.max(size, head.length)];
        java.util.Arrays.fill(out, (byte) '.');
        System.arraycopy(head, 0, out, 0, head.length);
        return out;
    }

    /** (partition, seq) named by a value "p:seq:...", or null. */
    private static long[] parseValue(byte[] v) {
        if (v == null) {
            return null;
        }
        int a = -1;
        int b = -1;
        for (int i = 0; i < v.length && i < 40; i++) {
            if (v[i] == ':') {
                if (a < 0) {
                    a = i;
                } else {
                    b = i;
                    break;
                }
            }
        }
        if (a <= 0 || b <= a + 1) {
            return null;
        }
        try {
            long p = Long.parseLong(new String(v, 0, a, StandardCharsets.UTF_8));
            long s = Long.parseLong(new String(v, a + 1, b - a - 1, StandardCharsets.UTF_8));
            return new long[] {p, s};
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String isolation) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "strait-bench-kill-count");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20000");
        cp.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(8 << 20));
        cp.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, String.valueOf(64 << 20));
        return new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    private static List<TopicPartition> partitions(KafkaConsumer<byte[], byte[]> c, String topic, long waitMs)
            throws InterruptedException {
        long deadline = System.currentTimeMillis() + waitMs;
        while (true) {
            List<PartitionInfo> infos = null;
            try {
                infos = c.partitionsFor(topic, Duration.ofSeconds(5));
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                infos = null;
            }
            if (infos != null && !infos.isEmpty()) {
                List<TopicPartition> tps = new ArrayList<>();
                for (int p = 0; p < infos.size(); p++) {
                    tps.add(new TopicPartition(topic, p));
                }
                return tps;
            }
            if (System.currentTimeMillis() > deadline) {
                System.err.println("topic " + topic + " does not exist");
                System.exit(1);
            }
            Thread.sleep(200);
        }
    }

    // --- watch ---------------------------------------------------------------------------------------------------

    private static void watch(String bootstrap, String topic, long[] expected, long interval) throws Exception {
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, "read_committed")) {
            List<TopicPartition> tps = partitions(c, topic, 600_000);
            c.assign(tps);
            c.seekToBeginning(tps);
            emit("ready " + System.currentTimeMillis());
            int n = tps.size();
            BitSet[] seen = new BitSet[n];
            long[] distinct = new long[n];
            for (int p = 0; p < n; p++) {
                seen[p] = new BitSet();
            }
            long records = 0;
            long lastProgress = 0;
            while (true) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(interval));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    records++;
                    long[] ps = parseValue(r.value());
                    int p = r.partition();
                    if (ps == null || ps[0] != p || ps[1] > Integer.MAX_VALUE) {
                        continue;
                    }
                    if (!seen[p].get((int) ps[1])) {
                        seen[p].set((int) ps[1]);
                        distinct[p]++;
                    }
                }
                long total = 0;
                boolean complete = true;
                for (int p = 0; p < n; p++) {
                    total += distinct[p];
                    if (p < expected.length && seen[p].nextClearBit(0) < expected[p]) {
                        complete = false;
                    }
                }
                long now = System.currentTimeMillis();
                if (complete) {
                    emit("done " + now + " " + total + " " + records);
                    return;
                }
                if (now - lastProgress >= 1000) {
                    lastProgress = now;
                    emit("progress " + now + " " + total + " " + records);
                }
            }
        }
    }

    // --- count ---------------------------------------------------------------------------------------------------

    private static void count(String bootstrap, String topic, String isolation) throws Exception {
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, isolation)) {
            List<TopicPartition> tps = partitions(c, topic, 30_000);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(30));
            c.assign(tps);
            c.seekToBeginning(tps);
            int n = tps.size();
            BitSet[] seen = new BitSet[n];
            long[] records = new long[n];
            long[] distinct = new long[n];
            long[] maxSeq = new long[n];
            long[] alien = new long[n];
            long[] outOfOrder = new long[n];
            for (int p = 0; p < n; p++) {
                seen[p] = new BitSet();
                maxSeq[p] = -1;
            }
            List<TopicPartition> open = new ArrayList<>();
            for (TopicPartition tp : tps) {
                if (ends.get(tp) > 0) {
                    open.add(tp);
                }
            }
            List<TopicPartition> done = new ArrayList<>(tps);
            done.removeAll(open);
            c.pause(done);
            long idleSince = System.currentTimeMillis();
            while (!open.isEmpty()) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(500));
                if (!recs.isEmpty()) {
                    idleSince = System.currentTimeMillis();
                } else if (System.currentTimeMillis() - idleSince > 90_000) {
                    System.err.println("no records for 90 s while partitions " + open + " are below their end "
                            + "(an open transaction holds the last stable offset?)");
                    System.exit(1);
                }
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    int p = r.partition();
                    if (r.offset() >= ends.get(tps.get(p))) {
                        continue;
                    }
                    records[p]++;
                    long[] ps = parseValue(r.value());
                    if (ps == null || ps[0] != p || ps[1] > Integer.MAX_VALUE) {
                        alien[p]++;
                        continue;
                    }
                    int s = (int) ps[1];
                    if (!seen[p].get(s)) {
                        seen[p].set(s);
                        distinct[p]++;
                        if (s < maxSeq[p]) {
                            outOfOrder[p]++;
                        }
                    }
                    maxSeq[p] = Math.max(maxSeq[p], s);
                }
                List<TopicPartition> still = new ArrayList<>();
                for (TopicPartition tp : open) {
                    if (c.position(tp) < ends.get(tp)) {
                        still.add(tp);
                    }
                }
                if (still.size() != open.size()) {
                    List<TopicPartition> finished = new ArrayList<>(open);
                    finished.removeAll(still);
                    c.pause(finished);
                    open = still;
                }
            }
            StringBuilder out = new StringBuilder("{\"isolation\": \"" + isolation + "\", \"partitions\": [");
            for (int p = 0; p < n; p++) {
                out.append(p == 0 ? "" : ", ").append("{\"end\": ").append(ends.get(tps.get(p)))
                        .append(", \"records\": ").append(records[p]).append(", \"distinct\": ").append(distinct[p])
                        .append(", \"max_seq\": ").append(maxSeq[p]).append(", \"alien\": ").append(alien[p])
                        .append(", \"out_of_order\": ").append(outOfOrder[p]).append("}");
            }
            emit(out.append("]}").toString());
        }
    }
}
