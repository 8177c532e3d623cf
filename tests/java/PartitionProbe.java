// A steady Java producer used as the referee in failover tests: it writes to explicit
// partitions in turn (never the partitioner's choice, so every partition gets records at the
// same steady rate) and prints one line per acknowledged record, so the test can see exactly
// which records the cluster took and when each partition stalled.
//
// Run in Java's source-file mode with the Kafka client jars on the class path:
//   java -cp '<kafka lib>/*' PartitionProbe.java <bootstrap> <topic> <partitions> <records/s>
//        <seconds> [producer.key=value ...] [probe.stop.file=<path>]
// It stops after <seconds>, or earlier once <path> exists (a test stops it when the events it
// waits for have happened, instead of guessing a duration long enough for a loaded machine).
// Output, one line per record:
//   A <partition> <offset> <ack epoch ms> <value>   acknowledged
//   E <partition> <value> <error>                  failed for good (delivery timeout)
// and a final line `DONE <sent> <acked> <failed>`.

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class PartitionProbe {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        double rate = Double.parseDouble(args[3]);
        long seconds = Long.parseLong(args[4]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("linger.ms", "5");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        java.io.File stopFile = null;
        for (int i = 5; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            String key = args[i].substring(0, eq);
            if (key.equals("probe.stop.file")) {
                stopFile = new java.io.File(args[i].substring(eq + 1));
            } else {
                props.put(key, args[i].substring(eq + 1));
            }
        }
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        long sent = 0;
        long[] seq = new long[partitions];
        long start = System.nanoTime();
        long end = start + seconds * 1_000_000_000L;
        long stopCheckedAt = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            while (System.nanoTime() < end) {
                if (stopFile != null && System.nanoTime() - stopCheckedAt > 100_000_000L) {
                    stopCheckedAt = System.nanoTime();
                    if (stopFile.exists()) {
                        break;
                    }
                }
                // Paced from the start time, so a stall does not lower the rate afterwards.
                long due = start + (long) (sent * 1_000_000_000.0 / rate);
                long now = System.nanoTime();
                if (due > now) {
                    Thread.sleep((due - now) / 1_000_000, (int) ((due - now) % 1_000_000));
                }
                int p = (int) (sent % partitions);
                String value = p + "-" + seq[p]++;
                sent++;
                producer.send(new ProducerRecord<>(topic, p, null, value), (md, e) -> {
                    synchronized (out) {
                        try {
                            if (e == null) {
                                acked.incrementAndGet();
                                out.write("A " + md.partition() + " " + md.offset() + " "
                                        + System.currentTimeMillis() + " " + value + "\n");
                            } else {
                                failed.incrementAndGet();
                                out.write("E " + p + " " + value + " "
                                        + e.getClass().getSimpleName() + "\n");
                            }
                        } catch (java.io.IOException io) {
                            throw new RuntimeException(io);
                        }
                    }
                });
            }
            producer.flush();
        }
        synchronized (out) {
            out.write("DONE " + sent + " " + acked.get() + " " + failed.get() + "\n");
            out.flush();
        }
    }
}
