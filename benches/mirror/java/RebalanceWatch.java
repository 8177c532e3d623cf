// Strait bench, rebalance phase (benches/mirror/rebalance.py): when each target partition made progress, and who owned
// it in the mirror's consumer group on the source, in one long-lived JVM started before the mirror.
//
// Usage: java ... RebalanceWatch <target bootstrap> <topic> <source bootstrap> <group> <interval ms>
// Prints lines on stdout:
//   ready <epoch ms> <partitions>           the target topic exists (waits for it)
//   src <epoch ms> <p,p,...|->              every <interval ms>, first: the partitions whose SOURCE end offset grew since
//                                           the previous listing (the producer wrote to them: the mirror has more to copy)
//   adv <epoch ms> <p,p,...|->              then: the partitions whose TARGET end offset grew since the previous listing
//                                           (ListOffsets latest of every partition, one request per cluster per round)
//   behind <epoch ms> <p,p,...|->           last, at the target listing's time: the partitions whose source end offset (as
//                                           just listed) is ahead of the target's (records not yet on the target)
//   owners <epoch ms> <state> <json>        the group's assignment whenever it changed (checked about every second):
//                                           {"<group.instance.id or client/member id>": [partitions], ...}
// The source is listed before the target so that "behind" never blames the mirror for a record written after the
// target was listed. A target with duplicates has a higher end offset than the records it holds: "behind" misses such a
// partition's lag until its next source write ("src"), which rebalance_stats.longest_lag_pause also counts.
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
            long[] srcEnds = new long[n];
            String lastOwners = "";
            long nextOwners = 0;
            long next = System.currentTimeMillis();
            while (true) {
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> rs;
                long srcAt;
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r;
                try {
                    rs = source.listOffsets(latest).all().get(30, TimeUnit.SECONDS);
                    srcAt = System.currentTimeMillis();
                    r = target.listOffsets(latest).all().get(30, TimeUnit.SECONDS);
                } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                    // a starved broker (a loaded machine): the next listing will tell
                    System.err.println("listOffsets failed (retrying): " + e);
                    Thread.sleep(interval);
                    continue;
                }
                long now = System.currentTimeMillis();
                emit("src " + srcAt + " " + grown(rs, srcEnds));
                emit("adv " + now + " " + grown(r, ends)); // updates ends: `behind` below compares the new ones
                StringBuilder behind = new StringBuilder();
                for (int p = 0; p < n; p++) {
                    if (srcEnds[p] > ends[p]) {
                        behind.append(behind.length() == 0 ? "" : ",").append(p);
                    }
                }
                emit("behind " + now + " " + (behind.length() == 0 ? "-" : behind.toString()));
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

    /** Raises `ends` to the listed offsets; "p,p,..." of the partitions that grew, or "-". */
    private static String grown(Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r, long[] ends) {
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : r.entrySet()) {
            int p = e.getKey().partition();
            long off = e.getValue().offset();
            if (p < ends.length && off > ends[p]) {
                ends[p] = off;
                sb.append(sb.length() == 0 ? "" : ",").append(p);
            }
        }
        return sb.length() == 0 ? "-" : sb.toString();
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
