// Strait bench (WAN shapes): samples the end offsets of some topics on the source AND the target cluster, in one
// long-lived JVM, so the harness can see a mirror's lag over time (is it bounded or growing?) without a JVM start
// per sample. Both clusters are reached over their direct listeners, never through the delay proxies.
//
// Usage: java ... LagWatch <source bootstrap> <target bootstrap> <interval ms> <topic>...
// Prints "ready <epoch ms>" once both clusters answered, then every interval one line per topic:
//   lag <epoch ms> <topic> <source total> <target total>
// where a total is the sum of the topic's end offsets over its partitions (-1 while the topic does not exist or a
// partition has no leader). Runs until the harness stops it.

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
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public final class LagWatch {
    private LagWatch() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: LagWatch <source bootstrap> <target bootstrap> <interval ms> <topic>...");
            System.exit(2);
        }
        long interval = Long.parseLong(args[2]);
        List<String> topics = List.of(args).subList(3, args.length);
        try (Admin source = admin(args[0]); Admin target = admin(args[1])) {
            source.describeCluster().nodes().get();
            target.describeCluster().nodes().get();
            System.out.println("ready " + System.currentTimeMillis());
            System.out.flush();
            Map<String, Map<TopicPartition, OffsetSpec>> srcReq = new HashMap<>();
            Map<String, Map<TopicPartition, OffsetSpec>> dstReq = new HashMap<>();
            while (true) {
                long started = System.currentTimeMillis();
                StringBuilder out = new StringBuilder();
                for (String topic : topics) {
                    long src = total(source, topic, srcReq);
                    long dst = total(target, topic, dstReq);
                    out.append("lag ").append(started).append(' ').append(topic).append(' ').append(src).append(' ')
                            .append(dst).append('\n');
                }
                System.out.print(out);
                System.out.flush();
                long sleep = interval - (System.currentTimeMillis() - started);
                if (sleep > 0) {
                    Thread.sleep(sleep);
                }
            }
        }
    }

    private static Admin admin(String bootstrap) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "strait-bench-lag");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        return Admin.create(props);
    }

    /** Sum of the end offsets of `topic`, or -1 while it does not exist or cannot be listed. */
    private static long total(Admin admin, String topic, Map<String, Map<TopicPartition, OffsetSpec>> known)
            throws InterruptedException {
        Map<TopicPartition, OffsetSpec> req = known.get(topic);
        if (req == null) {
            req = describe(admin, topic);
            if (req == null) {
                return -1;
            }
            known.put(topic, req);
        }
        try {
            long total = 0;
            for (ListOffsetsResult.ListOffsetsResultInfo info : admin.listOffsets(req).all().get().values()) {
                total += info.offset();
            }
            return total;
        } catch (ExecutionException e) {
            known.remove(topic); // partitions added or a leader moving: describe again next time
            return -1;
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
}
