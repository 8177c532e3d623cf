// Strait bench, scale shapes: many topics and partitions in one JVM per step (one ProducerPerformance or RecordDigest
// per topic would cost a JVM start each, ~1 s, times hundreds of topics).
//
// Topics are <prefix>-000 ... <prefix>-<T-1>, P partitions each. Topic i is "busy" if i < busyTopics: its partitions
// hold recsBusy records each, the others recsIdle (the "many idle, few busy" shape: recsIdle = 1, so that every
// partition still has something to start with; the many-partitions shape: busyTopics = T).
//
// Usage: java -cp '<kafka 4.x lib>/*:<classes>' ScaleData <bootstrap> <command> [args]
//   create  <prefix> <T> <P> <replication factor> <min.insync.replicas>
//   produce <prefix> <T> <P> <busyTopics> <recsBusy> <recsIdle> <value bytes> <payload file> <compression>
//           writes to explicit partitions (acks=all, linger.ms=10, batch.size=65536); value = seq:8 + payload line
//   digest  <prefix> <T>
//           reads every partition to the end offset it had at start; one JSON line:
//           {"count": N, "bytes": B, "partitions": {"<topic>/<p>": "<count>:<order-sensitive hash>", ...}}
//   referee <prefix> <T> <P> <create: 1 = create the topics first, 0 = they exist>
//           the broker's own pace for a mirror's start-up: (creates T topics of P partitions in CreateTopics requests
//           of 100 topics, not waiting for leaders, as Strait does, then) one Java producer (acks=all, linger.ms=0,
//           16 sending threads, so a topic's metadata wait does not hold the others) writes ONE record to each
//           partition; one JSON line, ms since start: {"created_ms", "first_ack_ms", "all_acked_ms", "errors"}
//   watch   <prefix> <T> <P> <busyTopics> <recsBusy> <recsIdle> <interval ms>
//           lists the end offsets of every partition every interval; stdout lines "<event> <epoch ms> <n>":
//           ready, first (first record on the target), started (every partition has >= 1 record; n = partitions),
//           progress (about once a second; n = records), done (every partition has its expected end offset)
// Exit 0 on success, 1 on failure (reason on stderr), 2 on bad arguments.

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.zip.CRC32C;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ScaleData {
    private static final long PRIME = 0x100000001B3L;

    private ScaleData() {}

    static String topic(String prefix, int i) {
        return String.format("%s-%03d", prefix, i);
    }

    static List<String> topics(String prefix, int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(topic(prefix, i));
        }
        return out;
    }

    /** Security settings for every client: the bench passes them as -Dscale.<kafka key>=<value> (mTLS shapes). */
    static void security(Properties p) {
        for (String k : System.getProperties().stringPropertyNames()) {
            if (k.startsWith("scale.")) {
                p.put(k.substring("scale.".length()), System.getProperty(k));
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: ScaleData <bootstrap> create|produce|digest|watch ...");
            System.exit(2);
        }
        String bootstrap = args[0];
        String prefix = args[2];
        try {
            switch (args[1]) {
                case "create" -> create(bootstrap, prefix, i(args[3]), i(args[4]), i(args[5]), i(args[6]));
                case "produce" -> produce(bootstrap, prefix, i(args[3]), i(args[4]), i(args[5]), i(args[6]),
                        i(args[7]), i(args[8]), Path.of(args[9]), args[10]);
                case "digest" -> digest(bootstrap, prefix, i(args[3]));
                case "referee" -> referee(bootstrap, prefix, i(args[3]), i(args[4]), i(args[5]) == 1);
                case "watch" -> watch(bootstrap, prefix, i(args[3]), i(args[4]), i(args[5]), i(args[6]), i(args[7]),
                        i(args[8]));
                default -> {
                    System.err.println("unknown command " + args[1]);
                    System.exit(2);
                }
            }
        } catch (ExecutionException e) {
            System.err.println("ScaleData " + args[1] + " failed: " + e.getCause());
            System.exit(1);
        }
        System.exit(0);
    }

    static int i(String s) {
        return Integer.parseInt(s);
    }

    static Admin admin(String bootstrap) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "strait-bench-scale");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "60000");
        security(props);
        return Admin.create(props);
    }

    static void create(String bootstrap, String prefix, int t, int p, int rf, int minIsr) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<String> names = topics(prefix, t);
            // in chunks: one CreateTopics of thousands of partitions can outlast the controller's request timeout
            for (int from = 0; from < names.size(); from += 50) {
                List<NewTopic> news = new ArrayList<>();
                for (String n : names.subList(from, Math.min(names.size(), from + 50))) {
                    news.add(new NewTopic(n, p, (short) rf).configs(Map.of("min.insync.replicas", String.valueOf(minIsr))));
                }
                for (var entry : admin.createTopics(news).values().entrySet()) {
                    try {
                        entry.getValue().get();
                    } catch (ExecutionException e) {
                        if (!(e.getCause() instanceof TopicExistsException)) {
                            throw e;
                        }
                    }
                }
            }
            long deadline = System.currentTimeMillis() + 300_000;
            while (true) {
                boolean ready = true;
                try {
                    for (TopicDescription d : admin.describeTopics(names).allTopicNames().get().values()) {
                        for (TopicPartitionInfo pi : d.partitions()) {
                            ready &= pi.leader() != null && !pi.leader().isEmpty() && pi.isr().size() >= Math.min(rf, minIsr);
                        }
                    }
                } catch (ExecutionException e) {
                    ready = false;
                }
                if (ready) {
                    return;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(t + " topics have no leaders after 300 s");
                }
                Thread.sleep(200);
            }
        }
    }

    static void produce(String bootstrap, String prefix, int t, int p, int busy, int recsBusy, int recsIdle, int size,
            Path payload, String compression) throws Exception {
        List<byte[]> fillers = new ArrayList<>();
        for (String line : Files.readAllLines(payload, StandardCharsets.US_ASCII)) {
            if (!line.isEmpty()) {
                fillers.add(line.getBytes(StandardCharsets.US_ASCII));
            }
        }
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "strait-bench-scale");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "10");
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, "65536");
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        pp.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(256L << 20));
        security(pp);
        long seq = 0;
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            // round-robin over partitions in chunks of 100 records, so every partition gets batches of a real size
            int max = Math.max(recsBusy, recsIdle);
            for (int from = 0; from < max; from += 100) {
                for (int ti = 0; ti < t; ti++) {
                    int n = ti < busy ? recsBusy : recsIdle;
                    for (int part = 0; part < p; part++) {
                        for (int r = from; r < Math.min(n, from + 100); r++) {
                            byte[] v = new byte[size];
                            byte[] f = fillers.get((int) (seq % fillers.size()));
                            ByteBuffer.wrap(v).putLong(seq);
                            System.arraycopy(f, 0, v, 8, Math.min(f.length, size - 8));
                            prod.send(new ProducerRecord<>(topic(prefix, ti), part, null, v), (md, e) -> {
                                if (e != null) {
                                    System.err.println("send failed: " + e);
                                    System.exit(1);
                                }
                            });
                            seq++;
                        }
                    }
                }
            }
            prod.flush();
        }
        System.out.println("{\"records\": " + seq + "}");
    }

    static void referee(String bootstrap, String prefix, int t, int p, boolean create) throws Exception {
        long start = System.currentTimeMillis();
        long created = 0;
        List<String> names = topics(prefix, t);
        if (create) {
            try (Admin admin = admin(bootstrap)) {
                for (int from = 0; from < names.size(); from += 100) {
                    List<NewTopic> news = new ArrayList<>();
                    for (String n : names.subList(from, Math.min(names.size(), from + 100))) {
                        news.add(new NewTopic(n, p, (short) 1));
                    }
                    admin.createTopics(news).all().get();
                }
            }
            created = System.currentTimeMillis() - start;
        }
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "strait-bench-scale-referee");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "300000");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "300000");
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "60000");
        pp.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        security(pp);
        java.util.concurrent.atomic.AtomicLong first = new java.util.concurrent.atomic.AtomicLong(-1);
        java.util.concurrent.atomic.AtomicLong errors = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.CountDownLatch acked = new java.util.concurrent.CountDownLatch(t * p);
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Thread> threads = new ArrayList<>();
            for (int k = 0; k < 16; k++) {
                final int lane = k;
                Thread th = new Thread(() -> {
                    for (int ti = lane; ti < t; ti += 16) {
                        for (int part = 0; part < p; part++) {
                            prod.send(new ProducerRecord<>(topic(prefix, ti), part, null, new byte[100]), (md, e) -> {
                                if (e != null) {
                                    errors.incrementAndGet();
                                } else {
                                    first.compareAndSet(-1, System.currentTimeMillis() - start);
                                }
                                acked.countDown();
                            });
                        }
                    }
                });
                th.start();
                threads.add(th);
            }
            for (Thread th : threads) {
                th.join();
            }
            acked.await();
        }
        long all = System.currentTimeMillis() - start;
        System.out.println("{\"created_ms\": " + created + ", \"first_ack_ms\": " + first.get() + ", \"all_acked_ms\": "
                + all + ", \"errors\": " + errors.get() + "}");
    }

    static void digest(String bootstrap, String prefix, int t) throws Exception {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "strait-bench-scale-digest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20000");
        props.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, String.valueOf(64 << 20));
        security(props);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (String name : topics(prefix, t)) {
                var infos = consumer.partitionsFor(name, Duration.ofSeconds(60));
                if (infos == null || infos.isEmpty()) {
                    System.err.println("topic " + name + " does not exist");
                    System.exit(1);
                }
                for (var info : infos) {
                    tps.add(new TopicPartition(name, info.partition()));
                }
            }
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps, Duration.ofSeconds(60));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, long[]> acc = new HashMap<>(); // count, order-sensitive hash
            Set<TopicPartition> open = new HashSet<>();
            for (TopicPartition tp : tps) {
                acc.put(tp, new long[2]);
                if (ends.get(tp) > 0) {
                    open.add(tp);
                }
            }
            List<TopicPartition> done = new ArrayList<>(tps);
            done.removeAll(open);
            consumer.pause(done);
            CRC32C crc = new CRC32C();
            long total = 0;
            long bytes = 0;
            long idleSince = System.currentTimeMillis();
            while (!open.isEmpty()) {
                var recs = consumer.poll(Duration.ofMillis(500));
                if (recs.isEmpty() && System.currentTimeMillis() - idleSince > 120_000) {
                    System.err.println("no records for 120 s while " + open.size() + " partitions are below their end");
                    System.exit(1);
                }
                if (!recs.isEmpty()) {
                    idleSince = System.currentTimeMillis();
                }
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= ends.get(tp)) {
                        continue;
                    }
                    crc.reset();
                    if (r.key() != null) {
                        crc.update(r.key());
                    }
                    crc.update(r.value());
                    long[] a = acc.get(tp);
                    a[0]++;
                    a[1] = a[1] * PRIME ^ (crc.getValue() ^ ((long) r.value().length << 32));
                    total++;
                    bytes += r.value().length;
                }
                List<TopicPartition> finished = new ArrayList<>();
                for (TopicPartition tp : open) {
                    if (consumer.position(tp) >= ends.get(tp)) {
                        finished.add(tp);
                    }
                }
                if (!finished.isEmpty()) {
                    consumer.pause(finished);
                    finished.forEach(open::remove);
                }
            }
            StringBuilder out = new StringBuilder("{\"count\": ").append(total).append(", \"bytes\": ").append(bytes)
                    .append(", \"partitions\": {");
            boolean first = true;
            for (var e : new TreeMap<String, long[]>(toNames(acc)).entrySet()) {
                if (!first) {
                    out.append(", ");
                }
                first = false;
                out.append('"').append(e.getKey()).append("\": \"").append(e.getValue()[0]).append(':')
                        .append(Long.toHexString(e.getValue()[1])).append('"');
            }
            System.out.println(out.append("}}"));
        }
    }

    static Map<String, long[]> toNames(Map<TopicPartition, long[]> acc) {
        Map<String, long[]> out = new HashMap<>();
        acc.forEach((tp, a) -> out.put(tp.topic() + "/" + tp.partition(), a));
        return out;
    }

    static void watch(String bootstrap, String prefix, int t, int p, int busy, int recsBusy, int recsIdle, int interval)
            throws Exception {
        Map<TopicPartition, Long> expected = new HashMap<>();
        for (int ti = 0; ti < t; ti++) {
            for (int part = 0; part < p; part++) {
                expected.put(new TopicPartition(topic(prefix, ti), part), (long) (ti < busy ? recsBusy : recsIdle));
            }
        }
        long want = expected.values().stream().mapToLong(Long::longValue).sum();
        try (Admin admin = admin(bootstrap)) {
            admin.describeCluster().nodes().get();
            System.out.println("ready " + System.currentTimeMillis() + " 0");
            Set<String> wanted = new HashSet<>(topics(prefix, t));
            Set<TopicPartition> known = new HashSet<>();
            boolean first = false;
            boolean started = false;
            // when each partition was first seen holding data (set by the answers' callbacks)
            Map<TopicPartition, Long> seenAt = new java.util.concurrent.ConcurrentHashMap<>();
            long lastProgress = 0;
            while (true) {
                long t0 = System.currentTimeMillis();
                if (known.size() < expected.size()) {
                    // topics appear one by one while the mirror creates them
                    Set<String> present = new HashSet<>(admin.listTopics().names().get());
                    present.retainAll(wanted);
                    for (TopicPartition tp : expected.keySet()) {
                        if (present.contains(tp.topic())) {
                            known.add(tp);
                        }
                    }
                }
                Map<TopicPartition, Long> ends = new HashMap<>();
                if (!known.isEmpty()) {
                    Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                    for (TopicPartition tp : known) {
                        req.put(tp, OffsetSpec.latest());
                    }
                    // Per partition, bounded: a just-created partition without a leader yet fails only
                    // itself after at most the timeout (it counts as empty this round). Waiting for all of
                    // them (the admin retries a missing leader up to its API timeout) hid every record
                    // already on the target while a broker still created thousands of logs. The instant a
                    // partition is first seen with data is taken when its answer arrives, not at the end
                    // of the round.
                    ListOffsetsResult listed = admin.listOffsets(req,
                            new ListOffsetsOptions().timeoutMs(Math.max(1000, 10 * interval)));
                    for (TopicPartition tp : req.keySet()) {
                        listed.partitionResult(tp).whenComplete((info, err) -> {
                            if (err == null && info.offset() > 0) {
                                seenAt.putIfAbsent(tp, System.currentTimeMillis());
                            }
                        });
                    }
                    for (TopicPartition tp : req.keySet()) {
                        try {
                            ends.put(tp, listed.partitionResult(tp).get().offset());
                        } catch (ExecutionException e) {
                            // not served yet: next round
                        }
                    }
                }
                long total = 0;
                int withData = 0;
                boolean complete = known.size() == expected.size();
                for (var e : expected.entrySet()) {
                    long end = ends.getOrDefault(e.getKey(), 0L);
                    total += Math.min(end, e.getValue());
                    if (end > 0) {
                        withData++;
                    }
                    complete &= end >= e.getValue();
                }
                long now = System.currentTimeMillis();
                if (!first && total > 0) {
                    first = true;
                    long at = seenAt.values().stream().mapToLong(Long::longValue).min().orElse(now);
                    System.out.println("first " + Math.min(at, now) + " " + total);
                }
                if (!started && withData == expected.size()) {
                    started = true;
                    long at = seenAt.values().stream().mapToLong(Long::longValue).max().orElse(now);
                    System.out.println("started " + Math.min(at, now) + " " + withData);
                }
                if (now - lastProgress >= 1000) {
                    lastProgress = now;
                    System.out.println("progress " + now + " " + total + " " + withData);
                }
                if (complete) {
                    System.out.println("done " + now + " " + want);
                    return;
                }
                long sleep = interval - (System.currentTimeMillis() - t0);
                if (sleep > 0) {
                    Thread.sleep(sleep);
                }
            }
        }
    }
}
