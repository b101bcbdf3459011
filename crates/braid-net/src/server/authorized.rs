//! The agent keys the server accepts, re-read from the authorized file when it changes.
//!
//! Owns: when to look at the file again (its modification time, once a second, by one task
//! of its own, [`watch`]: a key added is taken and logged within a second, not at the next
//! handshake; the workers' copies have no file and read the shared list only) and putting
//! what it read into the one shared
//! list ([`control::Authorized`](super::control::Authorized)), which a SIGHUP reload
//! (`ServerControl::reload_authorized`) replaces too: the last of the two to change it
//! wins, and every handshake and key rotation reads that list. Must not touch: the
//! handshake (braid-crypto checks a key against the list) and sessions (a session whose key
//! was removed ends when its keys are due for rotation: the rotation is refused).
//!
//! A file that cannot be read or parsed keeps the previous list, with a warning that names
//! the file and the error (a half-written file must not lock every agent out).

use super::control::Authorized;
use braid_crypto::PublicKey;
use std::path::PathBuf;
use std::sync::RwLockReadGuard;
use std::time::{Duration, Instant, SystemTime};
use tracing::{info, warn};

/// How often the file's modification time is looked at, at most.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The authorized keys (shared with the control handle), and the file they come from (if
/// any).
#[derive(Debug, Clone)]
pub struct AuthorizedKeys {
    keys: Authorized,
    file: Option<PathBuf>,
    modified: Option<SystemTime>,
    checked: Option<Instant>,
}

impl AuthorizedKeys {
    /// `keys`, replaced by what `file` holds whenever its modification time changes. The
    /// file is read again at the first look: `keys` were read from it earlier, and a key
    /// added in between (an operator's `echo KEY >> agents.txt` while the server starts)
    /// would otherwise carry a modification time taken as already seen, and never count.
    pub fn new(keys: Authorized, file: Option<PathBuf>) -> Self {
        AuthorizedKeys {
            keys,
            file,
            modified: None,
            checked: None,
        }
    }

    /// The current list, after re-reading the file if it changed (at most once per
    /// [`RECHECK`]).
    pub fn get(&mut self, now: Instant) -> Vec<PublicKey> {
        self.read(now).clone()
    }

    /// [`AuthorizedKeys::get`] without a copy: the list under its read lock (hold it only
    /// while one message 1 is read; a reload waits for it).
    pub fn read(&mut self, now: Instant) -> RwLockReadGuard<'_, Vec<PublicKey>> {
        self.refresh(now);
        self.keys.read().unwrap_or_else(|p| p.into_inner())
    }

    /// How many keys the list holds now.
    pub fn count(&self) -> usize {
        self.keys.read().map_or(0, |k| k.len())
    }

    fn refresh(&mut self, now: Instant) {
        if self.file.is_none()
            || self
                .checked
                .is_some_and(|t| now.duration_since(t) < RECHECK)
        {
            return;
        }
        self.checked = Some(now);
        self.reread();
    }

    /// Read the file again if its modification time changed.
    fn reread(&mut self) {
        let Some(file) = &self.file else { return };
        let modified = std::fs::metadata(file).and_then(|m| m.modified()).ok();
        if modified == self.modified {
            return;
        }
        self.modified = modified;
        match braid_crypto::read_authorized(file) {
            Ok(keys) => {
                info!(file = %file.display(), keys = keys.len(), "authorized keys re-read");
                if let Ok(mut k) = self.keys.write() {
                    *k = keys;
                }
            }
            Err(e) => warn!("{e}; keeping the {} keys read before", self.count()),
        }
    }
}

/// Look at the file every [`RECHECK`] and re-read it when it changed, until dropped: a key
/// added is taken, and logged, within a second (docs/deployment.md says the file is read at
/// once), whether or not a handshake comes.
pub async fn watch(mut keys: AuthorizedKeys) {
    let mut tick = tokio::time::interval(RECHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        keys.reread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_crypto::StaticKeypair;

    #[test]
    fn a_changed_file_is_read_again_and_a_broken_one_keeps_the_list() {
        let dir = std::env::temp_dir().join(format!("braid-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("authorized");
        let (a, b) = (
            StaticKeypair::generate().unwrap().public(),
            StaticKeypair::generate().unwrap().public(),
        );
        std::fs::write(&f, format!("{}\n{}\n", a.to_base64(), b.to_base64())).unwrap();
        let shared: Authorized = std::sync::Arc::new(std::sync::RwLock::new(vec![a, b]));
        let mut k = AuthorizedKeys::new(shared.clone(), Some(f.clone()));
        let t0 = Instant::now();
        assert_eq!(k.get(t0).len(), 2);
        std::fs::write(&f, format!("# b removed\n{}\n", a.to_base64())).unwrap();
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(k.get(t0).len(), 2, "not looked at again within a second");
        assert_eq!(k.get(t0 + RECHECK), vec![a]);
        assert_eq!(*shared.read().unwrap(), vec![a], "one list: the shared one");
        // A reload (SIGHUP) replaces the same list; the file is not read again until it
        // changes.
        *shared.write().unwrap() = vec![b];
        assert_eq!(k.get(t0 + RECHECK * 2), vec![b]);
        std::fs::write(&f, "not a key\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(later + Duration::from_secs(5))
            .unwrap();
        assert_eq!(k.get(t0 + RECHECK * 3), vec![b], "kept");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 24: the package test appended the agent's key while the server started; the
    /// server had read the file before the append and took its modification time after
    /// it, so it never saw the key ("not in the authorized keys" until a restart).
    #[test]
    fn a_key_added_while_the_server_starts_is_seen() {
        let dir = std::env::temp_dir().join(format!("braid-auth-start-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agents.txt");
        std::fs::write(&f, "# none yet\n").unwrap();
        let read_at_start = braid_crypto::read_authorized(&f).unwrap();
        let a = StaticKeypair::generate().unwrap().public();
        std::fs::write(&f, format!("# none yet\n{}\n", a.to_base64())).unwrap();
        let shared: Authorized = std::sync::Arc::new(std::sync::RwLock::new(read_at_start));
        let mut k = AuthorizedKeys::new(shared, Some(f));
        assert_eq!(k.get(Instant::now()), vec![a]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
