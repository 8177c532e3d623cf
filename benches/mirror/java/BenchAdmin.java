// Strait bench: topic and offset administration in one short-lived JVM (a JVM start costs ~1 s on the bench box,
// the stock TopicCommand/GetOffsetShell would need one per call).
//
// Usage: java -cp '<kafka 4.x lib>/*:<classes>' BenchAdmin <bootstrap> <command> [args]
//   create <partitions> <topic>...   create topics (RF: the cluster's default.replication.factor), wait until every partition has a leader; existing ones are kept
//   offsets <topic>...               print one JSON line: {"<topic>": {"partitions": [end0, end1, ...], "bytes": N}}
//                                    (bytes = on-disk log size summed over partitions, from DescribeLogDirs)
// Exit 0 on success, 1 on failure (reason on stderr), 2 on bad arguments.

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;

public final class BenchAdmin {
    private BenchAdmin() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: BenchAdmin <bootstrap> create <partitions> <topic>... | offsets <topic>...");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        BenchClient.apply(props);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "strait-bench-admin");
        try (Admin admin = Admin.create(props)) {
            switch (args[1]) {
                case "create" -> create(admin, Integer.parseInt(args[2]), List.of(args).subList(3, args.length));
                case "offsets" -> offsets(admin, List.of(args).subList(2, args.length));
                default -> {
                    System.err.println("unknown command " + args[1]);
                    System.exit(2);
                }
            }
        } catch (ExecutionException e) {
            System.err.println("BenchAdmin " + args[1] + " failed: " + e.getCause());
            System.exit(1);
        }
    }

    private static void create(Admin admin, int partitions, List<String> topics) throws Exception {
        List<NewTopic> news = new ArrayList<>();
        for (String t : topics) {
            news.add(new NewTopic(t, Optional.of(partitions), Optional.empty())); // the broker's default.replication.factor
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
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            boolean ready = true;
            try {
                for (TopicDescription d : admin.describeTopics(topics).allTopicNames().get().values()) {
                    for (TopicPartitionInfo p : d.partitions()) {
                        ready &= p.leader() != null && !p.leader().isEmpty();
                    }
                }
            } catch (ExecutionException e) {
                ready = false; // metadata not propagated yet
            }
            if (ready) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("topics " + topics + " have no leaders after 60 s");
            }
            Thread.sleep(50);
        }
    }

    private static void offsets(Admin admin, List<String> topics) throws Exception {
        Map<String, TopicDescription> descs = admin.describeTopics(topics).allTopicNames().get();
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicDescription d : descs.values()) {
            for (TopicPartitionInfo p : d.partitions()) {
                req.put(new TopicPartition(d.name(), p.partition()), OffsetSpec.latest());
            }
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = admin.listOffsets(req).all().get();
        Map<String, Long> bytes = new HashMap<>();
        List<Integer> brokers = new ArrayList<>();
        for (Node n : admin.describeCluster().nodes().get()) {
            brokers.add(n.id());
        }
        for (Map<String, LogDirDescription> dirs : admin.describeLogDirs(brokers).allDescriptions().get().values()) {
            for (LogDirDescription dir : dirs.values()) {
                for (Map.Entry<TopicPartition, ReplicaInfo> r : dir.replicaInfos().entrySet()) {
                    bytes.merge(r.getKey().topic(), r.getValue().size(), Long::sum);
                }
            }
        }
        StringBuilder out = new StringBuilder("{");
        boolean firstTopic = true;
        for (String t : new TreeMap<>(descs).keySet()) {
            int n = descs.get(t).partitions().size();
            if (!firstTopic) {
                out.append(", ");
            }
            firstTopic = false;
            out.append('"').append(t).append("\": {\"partitions\": [");
            for (int p = 0; p < n; p++) {
                if (p > 0) {
                    out.append(", ");
                }
                out.append(ends.get(new TopicPartition(t, p)).offset());
            }
            out.append("], \"bytes\": ").append(bytes.getOrDefault(t, 0L)).append('}');
        }
        System.out.println(out.append('}'));
    }
}
