//! The handshake replay guard and its state file.
//!
//! Owns: [`ReplayGuard`] (per client key, the newest handshake timestamp accepted) and the
//! file that keeps it across server restarts. Must not touch: the Noise handshake (it
//! calls the guard), key files and any file other than the one the caller names.
//!
//! State file (text, written whole to `PATH.tmp`, flushed to disk, then renamed over
//! `PATH`, so a crash leaves the old or the new version, never half of one):
//!
//! ```text
//! # braid replay guard: newest accepted handshake timestamp (unix ms) per agent key
//! <base64 public key> <timestamp ms>
//! ```
//!
//! No-panic contract: [`ReplayGuard::load`] accepts any file content and returns a
//! [`GuardFileError`] naming the file, the line and what to do.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::keys::{parse_public_key, PublicKey};
use crate::noise::HandshakeError;

/// State files larger than this are refused (one line is 56 bytes: 1 MiB is ~18 000 keys).
const MAX_FILE_LEN: u64 = 1 << 20;

/// What went wrong with the replay-guard state file.
#[derive(Debug, thiserror::Error)]
pub enum GuardFileError {
    /// It could not be read or written.
    #[error("replay-guard state file {path}: cannot {action}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// A line that is not `<base64 key> <timestamp>`.
    #[error(
        "replay-guard state file {path}: line {line}: {reason}; expected `<base64 agent \
         public key> <unix ms>`. The server writes this file itself: if it is damaged, \
         delete it (the server then accepts a handshake replayed within the clock-skew \
         window once per agent)"
    )]
    BadLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Larger than 1 MiB.
    #[error("replay-guard state file {path} is larger than 1 MiB; is it really the state file?")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
}

fn io_err<'a>(
    path: &'a Path,
    action: &'static str,
) -> impl FnOnce(io::Error) -> GuardFileError + 'a {
    move |source| GuardFileError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

/// Remembers, per client key, the newest handshake timestamp accepted, and refuses any
/// handshake that is not newer. Holds one entry per client that completed a handshake
/// (only authorized keys get there through [`crate::ServerHandshake::respond`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayGuard {
    newest: HashMap<PublicKey, u64>,
}

impl ReplayGuard {
    /// An empty guard.
    pub fn new() -> ReplayGuard {
        ReplayGuard::default()
    }

    /// The newest timestamp accepted from `client`.
    pub fn newest(&self, client: &PublicKey) -> Option<u64> {
        self.newest.get(client).copied()
    }

    /// Number of client keys remembered.
    pub fn len(&self) -> usize {
        self.newest.len()
    }

    /// True when no client key is remembered.
    pub fn is_empty(&self) -> bool {
        self.newest.is_empty()
    }

    /// [`HandshakeError::Replayed`] when `timestamp_ms` is not newer than every one
    /// accepted from `client` before. Changes nothing.
    pub fn check(&self, client: &PublicKey, timestamp_ms: u64) -> Result<(), HandshakeError> {
        match self.newest.get(client) {
            Some(newest) if timestamp_ms <= *newest => Err(HandshakeError::Replayed {
                client: *client,
                timestamp_ms,
                newest_ms: *newest,
            }),
            _ => Ok(()),
        }
    }

    /// Accept `timestamp_ms` from `client` if it is newer than every one accepted before
    /// (and remember it); otherwise [`HandshakeError::Replayed`] and no change.
    pub fn check_and_record(
        &mut self,
        client: &PublicKey,
        timestamp_ms: u64,
    ) -> Result<(), HandshakeError> {
        self.check(client, timestamp_ms)?;
        self.newest.insert(*client, timestamp_ms);
        Ok(())
    }

    /// The state file's text.
    pub fn to_text(&self) -> String {
        let mut rows: Vec<_> = self.newest.iter().collect();
        rows.sort_by_key(|(k, _)| k.0);
        let mut s = String::from(
            "# braid replay guard: newest accepted handshake timestamp (unix ms) per agent key\n",
        );
        for (k, t) in rows {
            s.push_str(&format!("{} {t}\n", k.to_base64()));
        }
        s
    }

    /// Parse a state file's text (`path` names it in errors).
    pub fn from_text(text: &str, path: &Path) -> Result<ReplayGuard, GuardFileError> {
        let mut g = ReplayGuard::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: String| GuardFileError::BadLine {
                path: path.to_path_buf(),
                line: i + 1,
                reason,
            };
            let (key, ts) = line
                .split_once(' ')
                .ok_or_else(|| bad("no space between key and timestamp".into()))?;
            let key = parse_public_key(key).map_err(|e| bad(e.to_string()))?;
            let ts: u64 = ts
                .trim()
                .parse()
                .map_err(|e| bad(format!("timestamp {ts:?}: {e}")))?;
            let e = g.newest.entry(key).or_insert(ts);
            *e = (*e).max(ts);
        }
        Ok(g)
    }

    /// Read the state file at `path`; a file that does not exist gives an empty guard
    /// (the first start).
    pub fn load(path: &Path) -> Result<ReplayGuard, GuardFileError> {
        let f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ReplayGuard::new()),
            Err(e) => return Err(io_err(path, "open it")(e)),
        };
        let mut text = String::new();
        f.take(MAX_FILE_LEN + 1)
            .read_to_string(&mut text)
            .map_err(io_err(path, "read it"))?;
        if text.len() as u64 > MAX_FILE_LEN {
            return Err(GuardFileError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        ReplayGuard::from_text(&text, path)
    }

    /// Write the guard to `path` atomically (a temporary file next to it, flushed to disk,
    /// renamed over it).
    pub fn save(&self, path: &Path) -> Result<(), GuardFileError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = File::create(&tmp).map_err(io_err(&tmp, "create it"))?;
        f.write_all(self.to_text().as_bytes())
            .map_err(io_err(&tmp, "write it"))?;
        f.sync_all().map_err(io_err(&tmp, "flush it to disk"))?;
        drop(f);
        fs::rename(&tmp, path).map_err(io_err(path, "replace it"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::StaticKeypair;

    #[test]
    fn monotonic_per_key() {
        let a = StaticKeypair::generate().unwrap().public();
        let b = StaticKeypair::generate().unwrap().public();
        let mut g = ReplayGuard::new();
        g.check_and_record(&a, 10).unwrap();
        assert!(g.check_and_record(&a, 10).is_err());
        assert!(g.check_and_record(&a, 9).is_err());
        g.check_and_record(&b, 5).unwrap();
        g.check_and_record(&a, 11).unwrap();
        assert!(g.check(&a, 11).is_err());
        assert_eq!((g.newest(&a), g.newest(&b)), (Some(11), Some(5)));
    }

    #[test]
    fn state_file_round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guard.state");
        assert!(ReplayGuard::load(&path).unwrap().is_empty());
        let mut g = ReplayGuard::new();
        for t in [1_700_000_000_000u64, 42] {
            let k = StaticKeypair::generate().unwrap().public();
            g.check_and_record(&k, t).unwrap();
        }
        g.save(&path).unwrap();
        assert_eq!(ReplayGuard::load(&path).unwrap(), g);
        assert!(!dir.path().join("guard.state.tmp").exists());
    }

    #[test]
    fn damaged_state_file_names_file_line_and_remedy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guard.state");
        let k = StaticKeypair::generate().unwrap().public().to_base64();
        for (text, line) in [
            (format!("# c\n{k} 12\n{k}\n"), 3),
            (format!("{k} -1\n"), 1),
            ("notakey 5\n".to_string(), 1),
            (format!("\n\n{k} 1 2\n"), 3),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = ReplayGuard::load(&path).unwrap_err();
            let msg = e.to_string();
            assert!(
                matches!(e, GuardFileError::BadLine { line: l, .. } if l == line),
                "{msg}"
            );
            assert!(
                msg.contains("guard.state") && msg.contains("delete it"),
                "{msg}"
            );
        }
        std::fs::write(&path, vec![b'#'; (MAX_FILE_LEN + 1) as usize]).unwrap();
        assert!(matches!(
            ReplayGuard::load(&path),
            Err(GuardFileError::TooLarge { .. })
        ));
    }
}
