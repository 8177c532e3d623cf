// Strait bench: end-to-end latency at a fixed rate. One JVM produces to the source cluster AND consumes where the
// records should appear (the target cluster through a mirror, or the source itself for the no-mirror baseline), so
// send and arrival times come from the same System.nanoTime clock.
//
// Usage: java ... LatencyProbe <produce bootstrap> <consume bootstrap> <topic> <rate/s> <record size>
//                              <payload file> <warmup s> <measure s> <compression> <linger ms> <batch size>
//                              [isolation level of the consumer: read_uncommitted (default) | read_committed]
// Phases, written into every record (value = seq:8, send nanoTime:8, phase:1, filler from the payload file):
//   probe   20 records/s until the first record arrives on the consume side (the mirror is up and has the topic);
//   warmup  full rate for <warmup s> (JIT, connection and batching settle; not counted);
//   measure full rate for <measure s>; only these records are counted.
// Then it waits up to 60 s for the measured records still in flight. stdout lines: "phase <name> <epoch ms>", one
// "result {json}" at the end with count, missing, duplicates and latency percentiles in ms.

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class LatencyProbe {
    private static final byte PROBE = 0;
    private static final byte WARMUP = 1;
    private static final byte MEASURE = 2;
    private static final int HEADER = 17;

    private LatencyProbe() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 11 && args.length != 12) {
            System.err.println("usage: LatencyProbe <produce bootstrap> <consume bootstrap> <topic> <rate> <size> "
                    + "<payload file> <warmup s> <measure s> <compression> <linger ms> <batch size> [isolation]");
            System.exit(2);
        }
        String topic = args[2];
        double rate = Double.parseDouble(args[3]);
        int size = Integer.parseInt(args[4]);
        List<byte[]> fillers = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(args[5]), StandardCharsets.US_ASCII)) {
            if (!line.isEmpty()) {
                fillers.add(line.getBytes(StandardCharsets.US_ASCII));
            }
        }
        long warmupNs = (long) (Double.parseDouble(args[6]) * 1e9);
        long measureNs = (long) (Double.parseDouble(args[7]) * 1e9);

        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        BenchClient.apply(pp);
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "strait-bench-latency");
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args[8]);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, args[9]);
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, args[10]);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
        BenchClient.apply(cp);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "strait-bench-latency");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        cp.put(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, "1");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        if (args.length == 12) {
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args[11]);
        }

        int capacity = (int) Math.min(Integer.MAX_VALUE - 8, rate * (measureNs / 1e9) * 1.5 + 10_000);
        long[] lat = new long[capacity];
        long[] bySeq = new long[capacity]; // latency of measured record i (0 = not received), for the trend
        AtomicBoolean arrived = new AtomicBoolean(false);
        AtomicBoolean producerDone = new AtomicBoolean(false);
        AtomicLong measuredFirst = new AtomicLong(-1);
        AtomicLong measuredLast = new AtomicLong(-2);
        long[] results = new long[3]; // received, duplicates, stored

        Thread consumerThread = new Thread(() -> {
            try (KafkaConsumer<byte[], byte[]> c =
                    new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                List<TopicPartition> tps = new ArrayList<>();
                while (tps.isEmpty()) {
                    try {
                        List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofSeconds(1));
                        if (infos != null) {
                            for (PartitionInfo i : infos) {
                                tps.add(new TopicPartition(topic, i.partition()));
                            }
                        }
                    } catch (RuntimeException e) {
                        // topic not there yet
                    }
                    if (tps.isEmpty()) {
                        Thread.sleep(100);
                    }
                }
                c.assign(tps);
                c.seekToBeginning(tps);
                BitSet seen = new BitSet();
                long doneAt = Long.MAX_VALUE;
                while (true) {
                    var recs = c.poll(Duration.ofMillis(100));
                    long now = System.nanoTime();
                    for (ConsumerRecord<byte[], byte[]> r : recs) {
                        ByteBuffer v = ByteBuffer.wrap(r.value());
                        if (v.remaining() < HEADER) {
                            continue;
                        }
                        long seq = v.getLong();
                        long sent = v.getLong();
                        byte phase = v.get();
                        arrived.set(true);
                        if (phase != MEASURE) {
                            continue;
                        }
                        int idx = (int) (seq - Math.max(0, measuredFirst.get()));
                        if (measuredFirst.get() < 0 || idx < 0) {
                            continue;
                        }
                        if (seen.get(idx)) {
                            results[1]++;
                            continue;
                        }
                        seen.set(idx);
                        results[0]++;
                        if (results[2] < lat.length) {
                            lat[(int) results[2]++] = now - sent;
                        }
                        if (idx < bySeq.length) {
                            bySeq[idx] = Math.max(1, now - sent);
                        }
                    }
                    if (producerDone.get()) {
                        long expected = measuredLast.get() - measuredFirst.get() + 1;
                        if (results[0] >= expected) {
                            return;
                        }
                        if (doneAt == Long.MAX_VALUE) {
                            doneAt = now;
                        } else if (now - doneAt > 60_000_000_000L) {
                            return;
                        }
                    }
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "latency-consumer");
        consumerThread.setDaemon(true);
        consumerThread.setUncaughtExceptionHandler((t, e) -> {
            e.printStackTrace();
            System.exit(1);
        });
        consumerThread.start();

        long seq = 0;
        int fillerIdx = 0;
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            phase("probe");
            while (!arrived.get()) {
                producer.send(new ProducerRecord<>(topic, record(seq++, PROBE, size, fillers.get(fillerIdx++ % fillers.size()))));
                Thread.sleep(50);
            }
            phase("warmup");
            byte current = WARMUP;
            long start = System.nanoTime();
            long sentInPhase = 0;
            long phaseStart = start;
            while (true) {
                long now = System.nanoTime();
                if (current == WARMUP && now - start >= warmupNs) {
                    current = MEASURE;
                    measuredFirst.set(seq);
                    phaseStart = now;
                    sentInPhase = 0;
                    phase("measure");
                }
                if (current == MEASURE && now - phaseStart >= measureNs) {
                    break;
                }
                long due = (long) ((now - phaseStart) * rate / 1e9) + 1;
                if (current == WARMUP) {
                    due = (long) ((now - start) * rate / 1e9) + 1;
                }
                while (sentInPhase < due) {
                    byte[] value = record(seq++, current, size, fillers.get(fillerIdx++ % fillers.size()));
                    producer.send(new ProducerRecord<>(topic, value));
                    sentInPhase++;
                }
                LockSupport.parkNanos(50_000);
            }
            measuredLast.set(seq - 1);
            producer.flush();
        }
        phase("drain");
        producerDone.set(true);
        consumerThread.join();
        phase("end");

        long sent = measuredLast.get() - measuredFirst.get() + 1;
        int n = (int) results[2];
        long[] sorted = Arrays.copyOf(lat, n);
        Arrays.sort(sorted);
        StringBuilder out = new StringBuilder("result {");
        out.append("\"sent\": ").append(sent)
                .append(", \"received\": ").append(results[0])
                .append(", \"missing\": ").append(sent - results[0])
                .append(", \"duplicates\": ").append(results[1])
                .append(", \"rate\": ").append(rate);
        if (n > 0) {
            double sum = 0;
            for (long v : sorted) {
                sum += v;
            }
            out.append(", \"mean_ms\": ").append(ms((long) (sum / n)))
                    .append(", \"p50_ms\": ").append(ms(pct(sorted, 0.50)))
                    .append(", \"p90_ms\": ").append(ms(pct(sorted, 0.90)))
                    .append(", \"p99_ms\": ").append(ms(pct(sorted, 0.99)))
                    .append(", \"p999_ms\": ").append(ms(pct(sorted, 0.999)))
                    .append(", \"max_ms\": ").append(ms(sorted[n - 1]));
            // p50 of the first and of the last tenth of the window (by send order): a mirror that cannot keep up
            // with the rate shows a growing backlog, i.e. last >> first
            int tenth = (int) Math.max(1, Math.min(bySeq.length, sent) / 10);
            int end = (int) Math.min(bySeq.length, sent);
            out.append(", \"p50_first10_ms\": ").append(ms(decileMedian(bySeq, 0, tenth)))
                    .append(", \"p50_last10_ms\": ").append(ms(decileMedian(bySeq, end - tenth, end)));
        }
        System.out.println(out.append('}'));
        System.out.flush();
        System.exit(0);
    }

    private static byte[] record(long seq, byte phase, int size, byte[] filler) {
        ByteBuffer b = ByteBuffer.allocate(Math.max(size, HEADER));
        b.putLong(seq).putLong(System.nanoTime()).put(phase);
        while (b.hasRemaining()) {
            b.put(filler, 0, Math.min(filler.length, b.remaining()));
        }
        return b.array();
    }

    private static long decileMedian(long[] bySeq, int from, int to) {
        long[] part = Arrays.stream(Arrays.copyOfRange(bySeq, Math.max(0, from), Math.max(from, to)))
                .filter(v -> v > 0).sorted().toArray();
        return part.length == 0 ? 0 : pct(part, 0.5);
    }

    private static long pct(long[] sorted, double q) {
        int i = (int) Math.ceil(q * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    private static String ms(long nanos) {
        return String.format(java.util.Locale.ROOT, "%.3f", nanos / 1e6);
    }

    private static void phase(String name) {
        System.out.println("phase " + name + " " + System.currentTimeMillis());
        System.out.flush();
    }
}
