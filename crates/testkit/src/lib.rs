//! # strait-testkit: real Apache Kafka brokers for tests
//!
//! Owns: fetching the Kafka jars from Maven Central (through `scripts/kafka-jars.sh`), and starting
//! and stopping KRaft clusters on free ports: single node, three nodes, mTLS with ACLs, SASL.
//!
//! Does not own: any Kafka client logic; tests talk to the brokers with `strait-wire` or the Java tools.
