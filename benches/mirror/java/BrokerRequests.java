// Strait bench: how many requests a broker has served so far, from its own JMX meters, so that a mirror's request
// rates are counted the same way for every contender (the bench's source broker has no other client during a run).
//
// Usage: java ... BrokerRequests <host:jmx port>
// Prints one JSON line: {"fetch": N, "metadata": N, "raw": {"<request>": N, ...}} where N is the Count of
// kafka.network:type=RequestMetrics,name=RequestsPerSec summed over versions; fetch = request=FetchConsumer if the
// broker splits consumer and follower fetches, else request=Fetch.

import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public final class BrokerRequests {
    private BrokerRequests() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: BrokerRequests <host:jmx port>");
            System.exit(2);
        }
        JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + args[0] + "/jmxrmi");
        try (JMXConnector c = JMXConnectorFactory.connect(url)) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            Set<ObjectName> names = s.queryNames(
                    new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*"), null);
            Map<String, Long> raw = new TreeMap<>();
            for (ObjectName n : names) {
                long count = ((Number) s.getAttribute(n, "Count")).longValue();
                raw.merge(n.getKeyProperty("request"), count, Long::sum);
            }
            long fetch = raw.containsKey("FetchConsumer") ? raw.get("FetchConsumer") : raw.getOrDefault("Fetch", 0L);
            StringBuilder out = new StringBuilder("{\"fetch\": ").append(fetch).append(", \"metadata\": ")
                    .append(raw.getOrDefault("Metadata", 0L)).append(", \"raw\": {");
            boolean first = true;
            for (var e : raw.entrySet()) {
                out.append(first ? "" : ", ").append('"').append(e.getKey()).append("\": ").append(e.getValue());
                first = false;
            }
            System.out.println(out.append("}}"));
        }
    }
}
