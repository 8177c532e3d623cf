// strait-testkit admin helper: creates topics and ACLs through the Kafka Admin client in ONE JVM, because a JVM start
// costs seconds on the 2-core test machines and the stock tools (TopicCommand, AclCommand) need one JVM per call.
//
// Usage: java -cp '<kafka lib>/*' StraitAdmin <admin-client.properties> <op> [-- <op>]...
//   op = topic <name> <partitions> <replication> [key=value]...
//      | acl <allow|deny> <principal> <topic|topic-prefix|group|group-prefix|cluster|transactional-id|transactional-id-prefix> <name> <Op>[,<Op>]...
//      | wait-isr <topic> <min-isr-size>      (wait until every partition's ISR has at least that many replicas)
// Operations run in order. Each one waits until its effect is visible (topic leaders elected, ACLs listed) before the
// next one starts. Exit code 0 = all done; 1 = an operation failed (the reason is on stderr); 2 = bad arguments.
// Works with the kafka-clients of Kafka 3.9 and 4.x.

import java.io.FileInputStream;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public final class StraitAdmin {
    private static final long WAIT_MS = 60_000;

    private StraitAdmin() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: StraitAdmin <admin-client.properties> <op> [-- <op>]...");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        List<List<String>> ops = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            if (args[i].equals("--")) {
                ops.add(current);
                current = new ArrayList<>();
            } else {
                current.add(args[i]);
            }
        }
        ops.add(current);

        int status = 0;
        try (Admin admin = Admin.create(props)) {
            for (List<String> op : ops) {
                if (op.isEmpty()) {
                    continue;
                }
                try {
                    switch (op.get(0)) {
                        case "topic":
                            createTopic(admin, op);
                            break;
                        case "acl":
                            createAcls(admin, op);
                            break;
                        case "wait-isr":
                            waitIsr(admin, op);
                            break;
                        default:
                            throw new IllegalArgumentException("unknown operation '" + op.get(0) + "'");
                    }
                } catch (IllegalArgumentException e) {
                    System.err.println("StraitAdmin: bad arguments " + op + ": " + e.getMessage());
                    status = 2;
                    break;
                } catch (ExecutionException e) {
                    Throwable cause = e.getCause() == null ? e : e.getCause();
                    System.err.println("StraitAdmin: " + op + " failed: " + cause);
                    status = 1;
                    break;
                } catch (Exception e) {
                    System.err.println("StraitAdmin: " + op + " failed: " + e);
                    status = 1;
                    break;
                }
            }
        }
        System.exit(status);
    }

    private static void createTopic(Admin admin, List<String> op) throws Exception {
        if (op.size() < 4) {
            throw new IllegalArgumentException("expected: topic <name> <partitions> <replication> [key=value]...");
        }
        String name = op.get(1);
        int partitions = Integer.parseInt(op.get(2));
        short replication = Short.parseShort(op.get(3));
        Map<String, String> configs = new HashMap<>();
        for (String kv : op.subList(4, op.size())) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("topic config '" + kv + "' is not key=value");
            }
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        NewTopic topic = new NewTopic(name, partitions, replication).configs(configs);
        admin.createTopics(List.of(topic)).all().get();

        // The controller has committed the topic; wait until a broker serves leaders for every partition so the
        // caller's next produce does not race the metadata propagation.
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (true) {
            try {
                TopicDescription d = describe(admin, name);
                boolean ready = d.partitions().size() == partitions;
                for (TopicPartitionInfo p : d.partitions()) {
                    ready &= p.leader() != null && !p.leader().isEmpty();
                }
                if (ready) {
                    return;
                }
            } catch (ExecutionException e) {
                // UnknownTopicOrPartition until the broker answering has the topic: retry.
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("topic " + name + " created but its partitions have no leader after "
                    + WAIT_MS + " ms");
            }
            Thread.sleep(100);
        }
    }

    private static void waitIsr(Admin admin, List<String> op) throws Exception {
        if (op.size() != 3) {
            throw new IllegalArgumentException("expected: wait-isr <topic> <min-isr-size>");
        }
        String name = op.get(1);
        int min = Integer.parseInt(op.get(2));
        long deadline = System.currentTimeMillis() + WAIT_MS;
        String last = "not described yet";
        while (true) {
            try {
                TopicDescription d = describe(admin, name);
                boolean ready = !d.partitions().isEmpty();
                for (TopicPartitionInfo p : d.partitions()) {
                    ready &= p.isr().size() >= min;
                }
                if (ready) {
                    return;
                }
                last = d.partitions().toString();
            } catch (ExecutionException e) {
                last = String.valueOf(e.getCause());
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("ISR of " + name + " below " + min + " after " + WAIT_MS
                    + " ms: " + last);
            }
            Thread.sleep(100);
        }
    }

    private static TopicDescription describe(Admin admin, String name) throws Exception {
        // allTopicNames() exists from 3.1 on (values() is gone in 4.x).
        return admin.describeTopics(List.of(name)).allTopicNames().get().get(name);
    }

    private static void createAcls(Admin admin, List<String> op) throws Exception {
        if (op.size() < 6) {
            throw new IllegalArgumentException(
                "expected: acl <allow|deny> <principal> <resource-type> <resource-name> <Op>[,<Op>]...");
        }
        AclPermissionType permission;
        switch (op.get(1).toLowerCase(Locale.ROOT)) {
            case "allow":
                permission = AclPermissionType.ALLOW;
                break;
            case "deny":
                permission = AclPermissionType.DENY;
                break;
            default:
                throw new IllegalArgumentException("permission must be allow or deny, got '" + op.get(1) + "'");
        }
        String principal = op.get(2);
        ResourcePattern pattern = pattern(op.get(3), op.get(4));
        List<AclBinding> bindings = new ArrayList<>();
        for (String list : op.subList(5, op.size())) {
            for (String name : list.split(",")) {
                if (name.isBlank()) {
                    continue;
                }
                bindings.add(new AclBinding(pattern,
                    new AccessControlEntry(principal, "*", operation(name.trim()), permission)));
            }
        }
        admin.createAcls(bindings).all().get();

        // Wait until the broker answering DescribeAcls lists them: its authorizer has applied the metadata record.
        AclBindingFilter filter = new AclBindingFilter(pattern.toFilter(),
            new AccessControlEntryFilter(principal, null, AclOperation.ANY, permission));
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (true) {
            Collection<AclBinding> seen = admin.describeAcls(filter).values().get();
            if (seen.containsAll(bindings)) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("ACLs created but not visible after " + WAIT_MS + " ms: " + bindings);
            }
            Thread.sleep(100);
        }
    }

    private static ResourcePattern pattern(String type, String name) {
        switch (type.toLowerCase(Locale.ROOT)) {
            case "topic":
                return new ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL);
            case "topic-prefix":
                return new ResourcePattern(ResourceType.TOPIC, name, PatternType.PREFIXED);
            case "group":
                return new ResourcePattern(ResourceType.GROUP, name, PatternType.LITERAL);
            case "group-prefix":
                return new ResourcePattern(ResourceType.GROUP, name, PatternType.PREFIXED);
            case "cluster":
                return new ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL);
            case "transactional-id":
                return new ResourcePattern(ResourceType.TRANSACTIONAL_ID, name, PatternType.LITERAL);
            case "transactional-id-prefix":
                return new ResourcePattern(ResourceType.TRANSACTIONAL_ID, name, PatternType.PREFIXED);
            default:
                throw new IllegalArgumentException("unknown resource type '" + type + "'");
        }
    }

    /** "Read", "READ", "DescribeConfigs", "describe_configs", "IdempotentWrite" -> AclOperation. */
    private static AclOperation operation(String name) {
        StringBuilder upper = new StringBuilder();
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            if (i > 0 && Character.isUpperCase(c) && Character.isLowerCase(name.charAt(i - 1))) {
                upper.append('_');
            }
            upper.append(c == '-' ? '_' : Character.toUpperCase(c));
        }
        AclOperation op = AclOperation.fromString(upper.toString());
        if (op == AclOperation.UNKNOWN || op == AclOperation.ANY) {
            throw new IllegalArgumentException("unknown ACL operation '" + name + "'");
        }
        return op;
    }
}
