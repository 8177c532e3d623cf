//! # strait-testkit: real Apache Kafka brokers for tests
//!
//! Owns: fetching the Kafka jars from Maven Central (through `scripts/kafka-jars.sh`), and starting and stopping
//! KRaft clusters of combined broker+controller nodes on free ports: one or three nodes, mTLS with the
//! StandardAuthorizer and ACLs, SASL (PLAIN, SCRAM). It generates each cluster's PKI with rcgen and runs the
//! Java tools (console producer/consumer, any main class, and a small Admin-client helper,
//! `kafka/tools/StraitAdmin.java`, that creates topics and ACLs in one JVM).
//!
//! Also: the fuzz targets' inputs for the stable tests that run them ([`fuzz`]).
//!
//! Does not own: any Kafka client logic. Tests talk to the brokers with `strait-wire` or with the Java tools.
//!
//! The API is synchronous (std only): async tests wrap it in `tokio::task::spawn_blocking`.
//!
//! ```no_run
//! use strait_testkit::{Cluster, Resource};
//! let cluster = Cluster::builder("europe").mtls().user("alice", "alice-secret").start()?;
//! cluster.create_topic("orders", 3, 1, &[])?;
//! cluster.add_acls("User:alice", Resource::Topic("orders".into()), &["Read", "Write", "Describe"])?;
//! cluster.console_produce("orders", &["hello".to_string()], Some("alice"))?;
//! # Ok::<(), strait_testkit::Error>(())
//! ```
//!
//! Every JVM carries `-Dstrait.testkit=1`. A watchdog process per cluster kills its JVMs if the test process
//! dies without running `Drop`; with `STRAIT_TEST_PIDS` set, every process started is also recorded there so
//! that the run's script stops exactly its own leftovers (see [`track_process`]). Environment:
//! `STRAIT_KEEP_CLUSTERS=1` keeps cluster dirs, `STRAIT_CACHE` moves the jar cache, `STRAIT_START_TIMEOUT_SECS`
//! changes the readiness timeout (120 s), `STRAIT_JAVA` picks the `java` binary, `STRAIT_CDS=0` turns off the
//! AppCDS archives that speed up JVM starts (kept next to the jars, in `<cache>/kafka-<version>/strait-cds`).

pub mod batch;
mod cds;
mod cluster;
mod delay_proxy;
mod error;
pub mod fuzz;
pub mod heap;
mod node;
mod pki;
mod ports;
mod process;
mod props;
mod registry;
mod tools;
mod version;
mod watchdog;

pub use cluster::{ADMIN_PASSWORD, AdminOp, Cluster, ClusterBuilder, Listener, Resource};
pub use delay_proxy::{DelayProxy, Link, ProxyStats};
pub use error::Error;
pub use pki::{ForeignCa, Pki, UserCert, Validity};
pub use process::JavaProcess;
pub use registry::{PIDS_ENV, track_process, untrack_process};
pub use tools::ConsumeOptions;
pub use version::{KafkaVersion, kafka_lib_dir};

#[cfg(test)]
mod tests {
    /// Tests share clusters across threads (`Arc<Cluster>`, `spawn_blocking`).
    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Cluster>();
        check::<crate::Pki>();
        check::<crate::Error>();
    }
}
