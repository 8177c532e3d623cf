//! Kafka versions, their jars, and the version-specific class names and options.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::error::Error;

/// Which Apache Kafka line a cluster runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KafkaVersion {
    /// The 4.x line (4.3.1, see kafka/pom-kafka-4.xml).
    #[default]
    V4,
    /// 3.9.2, the last line with MirrorMaker 1 (see kafka/pom-kafka-3.9.xml).
    V3_9,
}

impl KafkaVersion {
    /// The argument `scripts/kafka-jars.sh` takes for this line: "4" or "3.9".
    pub fn line(self) -> &'static str {
        match self {
            KafkaVersion::V4 => "4",
            KafkaVersion::V3_9 => "3.9",
        }
    }

    /// Main class of the console producer.
    pub fn console_producer_class(self) -> &'static str {
        match self {
            KafkaVersion::V4 => "org.apache.kafka.tools.ConsoleProducer",
            KafkaVersion::V3_9 => "kafka.tools.ConsoleProducer",
        }
    }

    /// Main class of the console consumer (kafka-tools in both lines).
    pub fn console_consumer_class(self) -> &'static str {
        "org.apache.kafka.tools.consumer.ConsoleConsumer"
    }

    /// Main class of `kafka-topics.sh` (kafka-tools in both lines).
    pub fn topic_command_class(self) -> &'static str {
        "org.apache.kafka.tools.TopicCommand"
    }

    /// Main class of `kafka-acls.sh`.
    pub fn acl_command_class(self) -> &'static str {
        match self {
            KafkaVersion::V4 => "org.apache.kafka.tools.AclCommand",
            KafkaVersion::V3_9 => "kafka.admin.AclCommand",
        }
    }

    /// Main class of `kafka-storage.sh` (core, both lines).
    pub fn storage_tool_class(self) -> &'static str {
        "kafka.tools.StorageTool"
    }

    /// Main class of MirrorMaker 2 in dedicated mode (connect-mirror, both lines).
    pub fn mirror_maker2_class(self) -> &'static str {
        "org.apache.kafka.connect.mirror.MirrorMaker"
    }

    /// Main class of MirrorMaker 1; it only exists in 3.9 (removed in 4.0).
    pub fn mirror_maker1_class(self) -> Option<&'static str> {
        match self {
            KafkaVersion::V4 => None,
            KafkaVersion::V3_9 => Some("kafka.tools.MirrorMaker"),
        }
    }

    /// The console tools' option naming the client config file: 4.x deprecates `--producer.config` and
    /// `--consumer.config` in favour of `--command-config`, which 3.9 does not know.
    pub(crate) fn client_config_flag(self, producer: bool) -> &'static str {
        match (self, producer) {
            (KafkaVersion::V4, _) => "--command-config",
            (KafkaVersion::V3_9, true) => "--producer.config",
            (KafkaVersion::V3_9, false) => "--consumer.config",
        }
    }

    /// The JVM option selecting the logging config: reload4j (log4j 1.2 API) in 3.9, log4j2 in 4.x.
    pub(crate) fn log_config_arg(self, tool: bool) -> String {
        let kafka = repo_root().join("kafka");
        match (self, tool) {
            (KafkaVersion::V4, false) => format!(
                "-Dlog4j2.configurationFile={}",
                kafka.join("log4j2.properties").display()
            ),
            (KafkaVersion::V4, true) => format!(
                "-Dlog4j2.configurationFile={}",
                kafka.join("tools-log4j2.properties").display()
            ),
            (KafkaVersion::V3_9, false) => format!(
                "-Dlog4j.configuration=file:{}",
                kafka.join("log4j.properties").display()
            ),
            (KafkaVersion::V3_9, true) => format!(
                "-Dlog4j.configuration=file:{}",
                kafka.join("tools-log4j.properties").display()
            ),
        }
    }
}

impl std::fmt::Display for KafkaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kafka {}", self.line())
    }
}

/// The repository root (where scripts/ and kafka/ live), found from this crate's manifest dir at build time.
pub(crate) fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.to_path_buf())
}

/// The lib dir holding every jar of Kafka line `v`, fetching the jars first if needed.
///
/// Runs `scripts/kafka-jars.sh <4|3.9>` (Maven, cache outside the tree, `STRAIT_CACHE` overrides it) once per line
/// and process; later calls return the remembered path.
pub fn kafka_lib_dir(v: KafkaVersion) -> Result<PathBuf, Error> {
    static CACHE: OnceLock<Mutex<HashMap<KafkaVersion, PathBuf>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // Holding the lock while the script runs keeps two threads from running Maven into the same cache at once.
    let mut known = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(dir) = known.get(&v) {
        return Ok(dir.clone());
    }
    let script = repo_root().join("scripts").join("kafka-jars.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(v.line())
        .output()
        .map_err(|e| Error::io(format!("running {}", script.display()), e))?;
    if !out.status.success() {
        return Err(Error::Jars {
            line: v.line(),
            detail: format!(
                "{} exited with {}: {}",
                script.display(),
                out.status,
                crate::error::tail(&String::from_utf8_lossy(&out.stderr), 30)
            ),
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| PathBuf::from(l.trim()))
        .filter(|d| d.is_dir())
        .ok_or_else(|| Error::Jars {
            line: v.line(),
            detail: format!("the script printed no existing lib dir (stdout: {stdout:?})"),
        })?;
    known.insert(v, dir.clone());
    Ok(dir)
}
