// Strait bench: watches the end offsets of one topic on the target cluster, in one long-lived JVM started BEFORE the
// mirror under test, so that "first record on the target" and "mirror complete" are timed without a JVM start per poll.
//
// Usage: java ... OffsetWatch <bootstrap> <topic> <partition|total|committed> <expected, comma-separated> <interval ms>
//   partition: complete when every target partition p has end offset >= expected[p] (mirrors that keep partitions)
//   total:     complete when the sum over target partitions >= sum(expected) (MirrorMaker 1 re-partitions)
//   committed: complete when a read_committed consumer has read >= expected[p] records of every partition p. For
//              exactly-once mirrors: their target holds one transaction marker per transaction and partition, so end
//              offsets pass the source's before every record is there, and records become visible only at commit.
//              The numbers printed are then records read (committed), not end offsets.
// Prints lines "<event> <epoch ms> <target total>" on stdout: ready (connected, before the mirror starts), topic (the
// target topic exists; the number is its partition count), first (first record seen), progress (about once a
// second), done; then exits 0.
// A watch that never completes is stopped by the harness.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class OffsetWatch {
    private OffsetWatch() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: OffsetWatch <bootstrap> <topic> <partition|total> <e0,e1,...> <interval ms>");
            System.exit(2);
        }
        String topic = args[1];
        boolean perPartition = args[2].equals("partition");
        boolean committed = args[2].equals("committed");
        String[] parts = args[3].split(",");
        long[] expected = new long[parts.length];
        long expectedTotal = 0;
        for (int i = 0; i < parts.length; i++) {
            expected[i] = Long.parseLong(parts[i].trim());
            expectedTotal += expected[i];
        }
        long interval = Long.parseLong(args[4]);
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        BenchClient.apply(props);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "strait-bench-watch");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        try (Admin admin = Admin.create(props)) {
            admin.describeCluster().nodes().get();
            emit("ready", 0);
            if (committed) {
                watchCommitted(admin, args[0], topic, expected, interval);
                return;
            }
            Map<TopicPartition, OffsetSpec> req = null;
            boolean seenFirst = false;
            long lastProgress = 0;
            while (true) {
                long started = System.currentTimeMillis();
                if (req == null) {
                    req = describe(admin, topic);
                    if (req != null) {
                        emit("topic", req.size()); // here the number is the partition count
                    }
                }
                if (req != null) {
                    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends;
                    try {
                        ends = admin.listOffsets(req).all().get();
                    } catch (ExecutionException e) {
                        ends = null; // leader moving or topic being created: poll again
                    }
                    if (ends != null) {
                        long total = 0;
                        int reached = 0;
                        for (var e : ends.entrySet()) {
                            long off = e.getValue().offset();
                            total += off;
                            int p = e.getKey().partition();
                            if (p < expected.length && off >= expected[p]) {
                                reached++;
                            }
                        }
                        boolean complete = perPartition ? reached == expected.length : total >= expectedTotal;
                        if (total > 0 && !seenFirst) {
                            seenFirst = true;
                            emit("first", total);
                        }
                        if (complete) {
                            emit("done", total);
                            return;
                        }
                        if (started - lastProgress >= 1000) {
                            lastProgress = started;
                            emit("progress", total);
                        }
                    }
                }
                long sleep = interval - (System.currentTimeMillis() - started);
                if (sleep > 0) {
                    Thread.sleep(sleep);
                }
            }
        }
    }

    // The committed mode: one read_committed consumer assigned every partition from the beginning, counting records.
    private static void watchCommitted(Admin admin, String bootstrap, String topic, long[] expected, long interval)
            throws InterruptedException {
        Map<TopicPartition, OffsetSpec> req;
        while ((req = describe(admin, topic)) == null) {
            Thread.sleep(interval);
        }
        emit("topic", req.size());
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        BenchClient.apply(cp);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "strait-bench-watch-committed");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20000");
        cp.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(8 << 20));
        cp.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, String.valueOf(64 << 20));
        long[] count = new long[Math.max(expected.length, req.size())];
        boolean seenFirst = false;
        long lastProgress = 0;
        try (KafkaConsumer<byte[], byte[]> c =
                new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>(req.keySet());
            c.assign(tps);
            c.seekToBeginning(tps);
            while (true) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(interval));
                for (TopicPartition tp : recs.partitions()) {
                    count[tp.partition()] += recs.records(tp).size();
                }
                long total = 0;
                int reached = 0;
                for (int p = 0; p < count.length; p++) {
                    total += count[p];
                    if (p < expected.length && count[p] >= expected[p]) {
                        reached++;
                    }
                }
                if (total > 0 && !seenFirst) {
                    seenFirst = true;
                    emit("first", total);
                }
                if (reached == expected.length) {
                    emit("done", total);
                    return;
                }
                long now = System.currentTimeMillis();
                if (now - lastProgress >= 1000) {
                    lastProgress = now;
                    emit("progress", total);
                }
            }
        }
    }

    private static Map<TopicPartition, OffsetSpec> describe(Admin admin, String topic) throws InterruptedException {
        try {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            Map<TopicPartition, OffsetSpec> req = new HashMap<>();
            for (TopicPartitionInfo p : d.partitions()) {
                if (p.leader() == null || p.leader().isEmpty()) {
                    return null;
                }
                req.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest());
            }
            return req.isEmpty() ? null : req;
        } catch (ExecutionException e) {
            return null; // not created yet
        }
    }

    private static void emit(String event, long total) {
        System.out.println(event + " " + System.currentTimeMillis() + " " + total);
        System.out.flush();
    }
}
