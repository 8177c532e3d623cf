//! The reverse flow's configuration: the same flow with `[source]` and `[target]` swapped.
//!
//! Its mirror group keeps the same `mirror.group_id`, which lives on the other cluster (a
//! mirror's group is on its source): `strait switchover` and `strait failback` write that
//! group's start positions on the new source, and running `strait switchover` with the reverse
//! configuration later moves the original mirror's group on the old source past everything the
//! reverse mirror wrote there.

use std::path::Path;

use super::file::{Access, write_atomically};
use crate::config::Config;
use crate::error::{Error, Result};

/// `config` with source and target swapped.
pub fn reverse(config: &Config) -> Config {
    let mut r = config.clone();
    std::mem::swap(&mut r.source, &mut r.target);
    r
}

/// The reverse configuration as strait.toml text. With `redact`, secrets are replaced as
/// `strait check` prints them; without, values that came from `${provider:...}` references are
/// written as those references (never resolved into the file), other values as given.
pub fn reverse_toml(config: &Config, redact: bool) -> String {
    let mut r = reverse(config);
    if !redact {
        for cluster in [&mut r.source, &mut r.target] {
            for (key, written) in &cluster.references {
                if let Some((_, v)) = cluster.properties.iter_mut().find(|(k, _)| k == key) {
                    v.clone_from(written);
                }
            }
        }
    }
    format!(
        "# The reverse flow {} -> {} (written by strait; start it once the command reports every \
         step done)\n{}",
        r.source.alias,
        r.target.alias,
        r.to_toml(redact)
    )
}

/// Writes [`reverse_toml`] (not redacted) to `file`, readable by the owner only on Unix (it may
/// hold the clusters' inline secrets, as the original file does).
pub fn write_reverse(config: &Config, file: &Path) -> Result<()> {
    let text = reverse_toml(config, false);
    write_atomically(file, text.as_bytes(), Access::OwnerOnly).map_err(|e| {
        Error::Runtime(format!(
            "cannot write the reverse configuration to {}: {e}; check the directory and its \
             permissions",
            file.display()
        ))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::Environment;

    #[test]
    fn the_reverse_flow_swaps_the_clusters_and_reads_back() {
        let text = "[source]\nalias = \"eu\"\n\"bootstrap.servers\" = \"a:1\"\n\
                    [target]\nalias = \"us\"\n\"bootstrap.servers\" = \"b:1\"\n\
                    [mirror]\ntopics = [\"orders\"]\ngroup_id = \"m\"\ngroups = [\"app\"]\n";
        let c = Config::from_toml_str(text, Path::new("t.toml"), &Environment::default())
            .unwrap()
            .config;
        let back = Config::from_toml_str(
            &reverse_toml(&c, false),
            Path::new("r.toml"),
            &Environment::default(),
        )
        .unwrap()
        .config;
        assert_eq!(
            (back.source.alias.as_str(), back.target.alias.as_str()),
            ("us", "eu")
        );
        assert_eq!(back.source.property("bootstrap.servers"), Some("b:1"));
        assert_eq!(back.mirror.group_id, "m");
        assert!(back.mirror.groups.unwrap().matches("app"));
        // Reversing twice gives the original flow.
        assert_eq!(reverse(&reverse(&c)).to_toml(false), c.to_toml(false));
    }
}
