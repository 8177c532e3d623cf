// Strait bench, rebalance phase (benches/mirror/rebalance.py): when each target partition made progress, and who owned
// it in the mirror's consumer group on the source, in one long-lived JVM started before the mirror.
//
// Usage: java ... RebalanceWatch <target bootstrap> <topic> <source bootstrap> <group> <interval ms>
// Prints lines on stdout:
//   ready <epoch ms> <partitions>           the target topic exists (waits for it)
//   adv <epoch ms> <p,p,...|->              every <interval ms>: the partitions whose end offset grew since the previous
//                                           listing (ListOffsets latest of every partition, one request per poll)
//   owners <epoch ms> <state> <json>        the group's assignment whenever it changed (checked about every second):
//                                           {"<group.instance.id or client/member id>": [partitions], ...}
// Runs until it is stopped (SIGTERM from the harness). Exit 1 on failure (reason on stderr), 2 on bad arguments.

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;

public final class RebalanceWatch {
    private RebalanceWatch() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: RebalanceWatch <target bootstrap> <topic> <source bootstrap> <group> <interval ms>");
            System.exit(2);
        }
        String topic = args[1];
        String group = args[3];
        long interval = Long.parseLong(args[4]);
        try (Admin target = admin(args[0], "strait-bench-rebalance-target");
                Admin source = admin(args[2], "strait-bench-rebalance-source")) {
            int n = partitions(target, topic);
            emit("ready " + System.currentTimeMillis() + " " + n);
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int p = 0; p < n; p++) {
                latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
            }
            long[] ends = new long[n];
            String lastOwners = "";
            long nextOwners = 0;
            long next = System.currentTimeMillis();
            while (true) {
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r;
                try {
                    r = target.listOffsets(latest).all().get(30, TimeUnit.SECONDS);
                } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                    // a starved broker (a loaded machine): the next listing will tell
                    System.err.println("listOffsets failed (retrying): " + e);
                    Thread.sleep(interval);
                    continue;
                }
                long now = System.currentTimeMillis();
                StringBuilder sb = new StringBuilder();
                for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : r.entrySet()) {
                    int p = e.getKey().partition();
                    long off = e.getValue().offset();
                    if (off > ends[p]) {
                        ends[p] = off;
                        sb.append(sb.length() == 0 ? "" : ",").append(p);
                    }
                }
                emit("adv " + now + " " + (sb.length() == 0 ? "-" : sb.toString()));
                if (now >= nextOwners) {
                    nextOwners = now + 1000;
                    String owners = owners(source, group, topic);
                    if (owners != null && !owners.equals(lastOwners)) {
                        lastOwners = owners;
                        emit("owners " + System.currentTimeMillis() + " " + owners);
                    }
                }
                next += interval;
                long sleep = next - System.currentTimeMillis();
                if (sleep > 0) {
                    Thread.sleep(sleep);
                } else {
                    next = System.currentTimeMillis(); // late (a loaded machine): no burst of catch-up polls
                }
            }
        }
    }

    private static Admin admin(String bootstrap, String clientId) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, clientId);
        return Admin.create(BenchClient.apply(props));
    }

    private static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static int partitions(Admin admin, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + 600_000;
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(10, TimeUnit.SECONDS)
                        .get(topic);
                return d.partitions().size();
            } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("topic " + topic + " does not exist: " + e.getCause());
                    System.exit(1);
                }
                Thread.sleep(200);
            }
        }
    }

    /** "<state> {json}" of the group's assignment of `topic`, or null when the group cannot be described now. */
    private static String owners(Admin admin, String group, String topic) throws InterruptedException {
        ConsumerGroupDescription d;
        try {
            d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(10, TimeUnit.SECONDS);
        } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
            return null;
        }
        Map<String, TreeSet<Integer>> byOwner = new TreeMap<>();
        for (MemberDescription m : d.members()) {
            String who = m.groupInstanceId().orElse(m.clientId() + "/" + m.consumerId());
            TreeSet<Integer> ps = byOwner.computeIfAbsent(who, k -> new TreeSet<>());
            for (TopicPartition tp : m.assignment().topicPartitions()) {
                if (tp.topic().equals(topic)) {
                    ps.add(tp.partition());
                }
            }
        }
        StringBuilder sb = new StringBuilder(d.groupState().toString()).append(" {");
        boolean first = true;
        for (Map.Entry<String, TreeSet<Integer>> e : byOwner.entrySet()) {
            sb.append(first ? "" : ", ").append('"').append(e.getKey().replace("\"", "")).append("\": ");
            first = false;
            List<Integer> ps = new ArrayList<>(e.getValue());
            sb.append(ps.toString());
        }
        return sb.append('}').toString();
    }
}
