//! Kafka client properties from a `.properties` file, `--prop key=value` and `--bootstrap`.
//!
//! Later sources win: the file, then each `--prop` in order, then `--bootstrap`. The file format
//! is the simple subset of Java properties that `scripts/kafka.sh` writes: one `key=value` (or
//! `key: value`) per line, `#` and `!` comments, blank lines. Line continuations and escapes are
//! not supported.

use std::path::Path;

use crate::error::{Error, Result};

/// Ordered `(key, value)` pairs, last setting of a key wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties(Vec<(String, String)>);

impl Properties {
    /// Sets `key` (replacing an earlier value).
    pub fn set(&mut self, key: &str, value: &str) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.to_string(),
            None => self.0.push((key.to_string(), value.to_string())),
        }
    }

    /// Reads a properties file into this set.
    pub fn load_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadProps {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_str(&text, &path.display().to_string())
    }

    /// Reads properties text (`origin` names it in errors).
    pub fn load_str(&mut self, text: &str, origin: &str) -> Result<()> {
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some(at) = line.find(['=', ':']) else {
                return Err(Error::Usage(format!(
                    "{origin}:{}: expected key=value, got {line:?}",
                    i + 1
                )));
            };
            let (k, v) = line.split_at(at);
            self.set(k.trim(), v[1..].trim());
        }
        Ok(())
    }

    /// Adds a `key=value` from the command line.
    pub fn set_arg(&mut self, arg: &str) -> Result<()> {
        let (k, v) = arg
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--prop {arg:?}: expected key=value, e.g. --prop security.protocol=SSL"
                ))
            })?;
        self.set(k.trim(), v.trim());
        Ok(())
    }

    /// The strait-wire client configuration.
    pub fn client_config(&self) -> Result<strait_wire::ClientConfig> {
        Ok(strait_wire::ClientConfig::from_properties(
            self.0.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )?)
    }

    /// A value.
    #[cfg(test)]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn file_then_args_then_bootstrap() {
        let mut p = Properties::default();
        p.load_str(
            "# written by strait-kafka\nbootstrap.servers=a:1\nsecurity.protocol = SSL\n\n! old style\nssl.ca.location: /ca.pem\n",
            "f",
        )
        .unwrap();
        p.set_arg("security.protocol=PLAINTEXT").unwrap();
        p.set("bootstrap.servers", "b:2");
        assert_eq!(p.get("bootstrap.servers"), Some("b:2"));
        assert_eq!(p.get("security.protocol"), Some("PLAINTEXT"));
        assert_eq!(p.get("ssl.ca.location"), Some("/ca.pem"));
        assert!(p.set_arg("nothing").is_err());
        assert!(p.set_arg("=x").is_err());
        assert!(p.load_str("just words", "f").is_err());
    }
}
