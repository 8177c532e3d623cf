// Strait bench, failover phase (benches/mirror/failover.py): the application side of a consumer-group failover, with
// Kafka's own producer, consumer and admin client.
//
// Usage: java -cp '<kafka 4.x lib>/*:<classes>' FailoverClient <bootstrap> <command> [args]
//   produce <topic> <partitions> <per partition> <value bytes> <compression>
//       writes <per partition> records to EVERY partition p, explicitly (no partitioner): key "p-seq", value
//       "p:seq:" padded with '.' to <value bytes>, seq = 0, 1, ... (acks=all, idempotent, linger.ms=10). The value
//       names its source partition and sequence, so whoever reads a copy knows exactly which record it is.
//   consume <topic> <group> <limits|end> [auto.offset.reset]
//       a consumer of group <group> (subscribe, so it joins the group as an application does) reads every partition p
//       from the group's committed offset (none: auto.offset.reset, default earliest) up to, not including, offset
//       limits[p] (comma-separated; "end" = the end offsets when it starts), then commits limits[p] for every
//       partition (commitSync) and leaves. Records fetched past a limit are not consumed (seek back, pause).
//       Prints on stdout:
//         start <p> <offset>            the position p was read from (the committed offset the group resumed at)
//         read <p> <seq from> <seq to>  consecutive records read from partition p, by the (partition, seq) in their
//                                       values (one line per run of consecutive seqs)
//         alien <p> <offset>            a record whose value does not name partition p (another partition's or not
//                                       the bench's): counted as such by the harness
//         commit <epoch ms>             right after commitSync returned
//   watch-groups <interval ms> <group>...
//       polls the groups' committed offsets (Admin.listConsumerGroupOffsets) every <interval ms>; prints
//       "ready <epoch ms>" once connected, then "offsets <epoch ms> <group> <topic>:<p>=<offset>,..." whenever a
//       group's offsets change (sorted; "-" when the group has none). Runs until stopped.
// Exit 0 on success, 1 on failure (reason on stderr), 2 on bad arguments.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class FailoverClient {
    private FailoverClient() {}

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
                produce(bootstrap, rest.get(0), Integer.parseInt(rest.get(1)), Integer.parseInt(rest.get(2)),
                        Integer.parseInt(rest.get(3)), rest.get(4));
            }
            case "consume" -> {
                if (rest.size() != 3 && rest.size() != 4) {
                    usage();
                }
                consume(bootstrap, rest.get(0), rest.get(1), rest.get(2), rest.size() == 4 ? rest.get(3) : "earliest");
            }
            case "watch-groups" -> {
                if (rest.size() < 2) {
                    usage();
                }
                watchGroups(bootstrap, Long.parseLong(rest.get(0)), rest.subList(1, rest.size()));
            }
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: FailoverClient <bootstrap> produce <topic> <partitions> <per partition> <value bytes>"
                + " <compression> | consume <topic> <group> <l0,l1,...|end> [auto.offset.reset]"
                + " | watch-groups <interval ms> <group>...");
        System.exit(2);
    }

    // --- produce -------------------------------------------------------------------------------------------------

    private static void produce(String bootstrap, String topic, int partitions, int perPartition, int valueBytes,
            String compression) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "strait-bench-failover-producer");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "10");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "65536");
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Future<RecordMetadata>> pending = new ArrayList<>();
            for (int seq = 0; seq < perPartition; seq++) {
                for (int p = 0; p < partitions; p++) {
                    byte[] key = (p + "-" + seq).getBytes(StandardCharsets.UTF_8);
                    pending.add(producer.send(new ProducerRecord<>(topic, p, key, value(p, seq, valueBytes))));
                }
                if (pending.size() >= 50_000) {
                    check(pending);
                }
            }
            producer.flush();
            check(pending);
        }
        System.out.println("produced " + (long) partitions * perPartition);
    }

    private static void check(List<Future<RecordMetadata>> pending) throws Exception {
        for (Future<RecordMetadata> f : pending) {
            f.get(); // a failed send fails the tool: the harness needs every record on the source
        }
        pending.clear();
    }

    static byte[] value(int partition, int seq, int size) {
        byte[] head = (partition + ":" + seq + ":").getBytes(StandardCharsets.UTF_8);
        byte[] v = new byte[Math.max(size, head.length)];
        Arrays.fill(v, (byte) '.');
        System.arraycopy(head, 0, v, 0, head.length);
        return v;
    }

    // --- consume -------------------------------------------------------------------------------------------------

    private static void consume(String bootstrap, String topic, String group, String limitsArg, String reset) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "strait-bench-failover-" + group);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, reset);
        props.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "2000");
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(60));
            if (infos == null || infos.isEmpty()) {
                throw new IllegalStateException("topic " + topic + " does not exist");
            }
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo i : infos) {
                tps.add(new TopicPartition(topic, i.partition()));
            }
            Map<TopicPartition, Long> limits = new HashMap<>();
            if (limitsArg.equals("end")) {
                limits.putAll(consumer.endOffsets(tps, Duration.ofSeconds(60)));
            } else {
                String[] l = limitsArg.split(",");
                if (l.length != tps.size()) {
                    throw new IllegalArgumentException(l.length + " limits for " + tps.size() + " partitions");
                }
                for (TopicPartition tp : tps) {
                    limits.put(tp, Long.parseLong(l[tp.partition()].trim()));
                }
            }
            Set<TopicPartition> started = new HashSet<>();
            Set<TopicPartition> done = new HashSet<>();
            Runs runs = new Runs();
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {}

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    // where each partition starts: the group's committed offset (or the reset), before any fetch
                    for (TopicPartition tp : parts) {
                        if (started.add(tp)) {
                            long pos = consumer.position(tp, Duration.ofSeconds(60));
                            System.out.println("start " + tp.partition() + " " + pos);
                        }
                    }
                }
            });
            long deadline = System.currentTimeMillis() + 600_000;
            while (done.size() < tps.size()) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("not every partition reached its limit in 600 s: done " + done);
                }
                var records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (done.contains(tp)) {
                        continue;
                    }
                    if (r.offset() >= limits.get(tp)) {
                        finish(consumer, tp, limits.get(tp), done);
                        continue;
                    }
                    int[] ps = parse(r.value());
                    if (ps == null || ps[0] != r.partition()) {
                        runs.flush(r.partition());
                        System.out.println("alien " + r.partition() + " " + r.offset());
                    } else {
                        runs.add(ps[0], ps[1]);
                    }
                    if (r.offset() + 1 >= limits.get(tp)) {
                        finish(consumer, tp, limits.get(tp), done);
                    }
                }
                for (TopicPartition tp : consumer.assignment()) {
                    if (!done.contains(tp) && consumer.position(tp) >= limits.get(tp)) {
                        finish(consumer, tp, limits.get(tp), done);
                    }
                }
            }
            runs.flushAll();
            Map<TopicPartition, OffsetAndMetadata> commit = new TreeMap<>((a, b) -> a.partition() - b.partition());
            for (TopicPartition tp : tps) {
                commit.put(tp, new OffsetAndMetadata(limits.get(tp)));
            }
            consumer.commitSync(commit, Duration.ofSeconds(60));
            System.out.println("commit " + System.currentTimeMillis());
            System.out.flush();
        }
    }

    private static void finish(KafkaConsumer<?, ?> consumer, TopicPartition tp, long limit, Set<TopicPartition> done) {
        consumer.seek(tp, limit);
        consumer.pause(List.of(tp));
        done.add(tp);
    }

    /** (partition, seq) from a value "p:seq:...", or null when it is not one of the bench's. */
    static int[] parse(byte[] v) {
        if (v == null) {
            return null;
        }
        int i = 0;
        int[] out = new int[2];
        for (int f = 0; f < 2; f++) {
            int n = 0;
            int start = i;
            while (i < v.length && v[i] >= '0' && v[i] <= '9' && i - start < 9) {
                n = n * 10 + (v[i] - '0');
                i++;
            }
            if (i == start || i >= v.length || v[i] != ':') {
                return null;
            }
            out[f] = n;
            i++;
        }
        return out;
    }

    /** Consecutive seqs per partition, printed as "read p from to" when a run breaks. */
    private static final class Runs {
        private final Map<Integer, long[]> open = new TreeMap<>();

        void add(int p, int seq) {
            long[] r = open.get(p);
            if (r != null && seq == r[1] + 1) {
                r[1] = seq;
                return;
            }
            flush(p);
            open.put(p, new long[] {seq, seq});
        }

        void flush(int p) {
            long[] r = open.remove(p);
            if (r != null) {
                System.out.println("read " + p + " " + r[0] + " " + r[1]);
            }
        }

        void flushAll() {
            for (int p : new ArrayList<>(open.keySet())) {
                flush(p);
            }
        }
    }

    // --- watch-group ---------------------------------------------------------------------------------------------

    private static void watchGroups(String bootstrap, long interval, List<String> groups) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "strait-bench-group-watch");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        try (Admin admin = Admin.create(props)) {
            admin.describeCluster().nodes().get();
            System.out.println("ready " + System.currentTimeMillis());
            System.out.flush();
            Map<String, String> last = new HashMap<>();
            while (true) {
                long t = System.currentTimeMillis();
                for (String group : groups) {
                    String now;
                    try {
                        Map<TopicPartition, OffsetAndMetadata> offs =
                                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                        TreeMap<String, Long> sorted = new TreeMap<>();
                        for (var e : offs.entrySet()) {
                            if (e.getValue() != null) {
                                sorted.put(e.getKey().topic() + ":" + e.getKey().partition(), e.getValue().offset());
                            }
                        }
                        StringBuilder b = new StringBuilder();
                        for (var e : sorted.entrySet()) {
                            b.append(b.length() == 0 ? "" : ",").append(e.getKey()).append('=').append(e.getValue());
                        }
                        now = b.length() == 0 ? "-" : b.toString();
                    } catch (java.util.concurrent.ExecutionException e) {
                        now = null; // coordinator loading or moving: poll again
                    }
                    if (now != null && !now.equals(last.get(group))) {
                        System.out.println("offsets " + t + " " + group + " " + now);
                        System.out.flush();
                        last.put(group, now);
                    }
                }
                long sleep = interval - (System.currentTimeMillis() - t);
                if (sleep > 0) {
                    Thread.sleep(sleep);
                }
            }
        }
    }
}
