//! Files the failover commands write (the stranded-records export, the reverse flow's
//! configuration): replaced whole and durably, so that a crash leaves the old file or the new
//! one, never a torn one, and a file reported written survives a power cut.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Who may read the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// As the process's umask says.
    Default,
    /// The owner only, on Unix (the file may hold secrets).
    OwnerOnly,
}

/// Writes `contents` to `file`: to a temporary file next to it, flushed to disk, renamed over
/// `file`, and the directory flushed too (the rename itself is durable only then).
pub(crate) fn write_atomically(
    file: &Path,
    contents: &[u8],
    access: Access,
) -> std::io::Result<()> {
    let tmp = temporary(file);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if access == Access::OwnerOnly {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = access;
    let written = options.open(&tmp).and_then(|mut f| {
        f.write_all(contents)?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, file)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_directory(file)
}

/// `<file>.tmp` in the same directory (a rename is atomic only within one file system).
fn temporary(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    file.with_file_name(name)
}

/// Flushes the directory holding `file` (its entry for the renamed file). Windows cannot open a
/// directory for this; NTFS journals the rename.
fn sync_directory(file: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        // A name ending in .tmp must not be its own temporary.
        let file = dir.path().join("records.tmp");
        write_atomically(&file, b"first\n", Access::Default).unwrap();
        write_atomically(&file, b"second\n", Access::OwnerOnly).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"second\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["records.tmp"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let other = dir.path().join("reverse.toml");
            write_atomically(&other, b"x", Access::OwnerOnly).unwrap();
            let mode = std::fs::metadata(&other).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.jsonl");
        write_atomically(&file, b"old", Access::Default).unwrap();
        // The temporary's place is taken by a directory: the write fails before the rename.
        std::fs::create_dir(dir.path().join("out.jsonl.tmp")).unwrap();
        assert!(write_atomically(&file, b"new", Access::Default).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"old");
    }
}
