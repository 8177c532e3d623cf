// Strait bench: the client settings every bench helper adds to its Kafka clients. The harness passes
// -Dbench.client.config=<properties file> to every helper JVM when the clusters need them (mTLS: security.protocol,
// ssl.keystore.*, ssl.truststore.*; benches/mirror/cluster.py Pki.write_java_client); without it nothing is added.

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;

final class BenchClient {
    private BenchClient() {}

    /** Adds the settings of -Dbench.client.config to `props` (a client's config) and returns it. */
    static Properties apply(Properties props) {
        String file = System.getProperty("bench.client.config");
        if (file == null || file.isEmpty()) {
            return props;
        }
        Properties extra = new Properties();
        try (InputStream in = new FileInputStream(file)) {
            extra.load(in);
        } catch (IOException e) {
            throw new UncheckedIOException("reading " + file, e);
        }
        props.putAll(extra);
        return props;
    }
}
