// Referee for tests/kafka/checkpoint_failover.rs: Kafka's own MirrorMaker 2 client
// (connect-mirror-client, RemoteClusterUtils.translateOffsets) reads the checkpoints Strait
// wrote on the target and prints what it would reset the group to, one line per partition:
// <topic> TAB <partition> TAB <offset>, sorted.
//
// Usage: java -cp '<kafka libs>/*' TranslateOffsets.java <target bootstrap> <source alias> <group>

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class TranslateOffsets {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> translated =
            RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(60));
        TreeMap<String, Long> sorted = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : translated.entrySet()) {
            sorted.put(
                String.format("%s\t%05d", e.getKey().topic(), e.getKey().partition()),
                e.getValue().offset());
        }
        for (Map.Entry<String, Long> e : sorted.entrySet()) {
            String[] tp = e.getKey().split("\t");
            System.out.println(tp[0] + "\t" + Integer.parseInt(tp[1]) + "\t" + e.getValue());
        }
    }
}
