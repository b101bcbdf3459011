//! The control socket of `braid agent` and `braid server`, and the client `braid status`
//! uses.
//!
//! A Unix stream socket, mode 0600 (only the owner, usually root, may ask), at
//! `--control PATH` or [`default_path`]. The protocol is one line each way: the client
//! sends `status\n`, the server answers the snapshot as one line of JSON (docs/status.md)
//! and closes; anything else gets `{"error": "..."}`. A stale socket file left by a
//! process that died is replaced; one that still answers is an error (another agent or
//! server is running).
//!
//! Owns: the socket file (created, chmod, removed on drop), the request line, the answer.
//! Must not touch: how snapshots are made (braid-net), what the CLI prints.

use crate::Source;
use std::io::{BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tracing::{debug, info};

/// The longest request line read.
const MAX_REQUEST: usize = 256;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What went wrong with a control socket.
#[derive(Debug, Error)]
pub enum ControlError {
    /// The socket could not be created.
    #[error("cannot create the control socket {path}: {source}; choose another place with --control PATH")]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another process answers on it.
    #[error("the control socket {path} is in use by a running braid process; stop it or give this one another --control PATH")]
    InUse {
        /// The socket's path.
        path: PathBuf,
    },
    /// Nothing answers there.
    #[error("cannot reach {path}: {source}; is `braid agent` or `braid server` running with this --control PATH (and may you open it: it is mode 0600)?")]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The exchange failed or the answer was not a snapshot.
    #[error("bad answer from {path}: {detail}")]
    Answer {
        /// The socket's path.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
}

/// The default socket of `role` (`agent` or `server`): `/run/braid-ROLE/ROLE.sock` as root
/// (the packaged units' runtime directories: one each, so stopping one unit never removes
/// the other's socket), else `$XDG_RUNTIME_DIR/braid/ROLE.sock`, else
/// `/tmp/braid-UID/ROLE.sock`.
pub fn default_path(role: &str) -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = if uid == 0 {
        PathBuf::from(format!("/run/braid-{role}"))
    } else if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        PathBuf::from(x).join("braid")
    } else {
        std::env::temp_dir().join(format!("braid-{uid}"))
    };
    dir.join(format!("{role}.sock"))
}

/// A bound control socket; the file is removed when this is dropped.
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl ControlServer {
    /// Create the socket at `path` (and its directory, mode 0700, if missing), mode 0600.
    /// Must be called within a tokio runtime.
    pub fn bind(path: &Path) -> Result<ControlServer, ControlError> {
        let err = |source| ControlError::Bind {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(err)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(err)?;
            }
        }
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ControlError::InUse {
                    path: path.to_path_buf(),
                });
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        let listener = UnixListener::bind(path).map_err(err)?;
        let server = ControlServer {
            listener,
            path: path.to_path_buf(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        info!(path = %path.display(), "control socket ready (braid status)");
        Ok(server)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answer requests until the task is dropped.
    pub async fn serve(self, source: Source) {
        loop {
            let Ok((conn, _)) = self.listener.accept().await else {
                continue;
            };
            let source = source.clone();
            tokio::spawn(async move {
                if let Err(e) = answer(conn, &source).await {
                    debug!("control connection: {e}");
                }
            });
        }
    }
}

async fn answer(conn: tokio::net::UnixStream, source: &Source) -> std::io::Result<()> {
    let (rd, mut wr) = conn.into_split();
    let mut line = String::new();
    let mut rd = BufReader::new(rd).take(MAX_REQUEST as u64);
    let got = tokio::time::timeout(REQUEST_TIMEOUT, rd.read_line(&mut line)).await;
    let reply = match got {
        Ok(Ok(_)) if line.trim() == "status" => {
            serde_json::to_string(&source.snapshot().await).map_err(std::io::Error::other)?
        }
        Ok(Ok(_)) => serde_json::json!({
            "error": format!("unknown request {:?}: send `status`", line.trim())
        })
        .to_string(),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    wr.write_all(reply.as_bytes()).await?;
    wr.write_all(b"\n").await?;
    wr.shutdown().await
}

use tokio::io::AsyncReadExt as _;

/// Ask the socket at `path` for a snapshot; returns its JSON text (blocking, for the CLI).
pub fn query(path: &Path, timeout: Duration) -> Result<String, ControlError> {
    let answer_err = |detail: String| ControlError::Answer {
        path: path.to_path_buf(),
        detail,
    };
    let mut s =
        std::os::unix::net::UnixStream::connect(path).map_err(|source| ControlError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .and_then(|()| s.write_all(b"status\n"))
        .map_err(|e| answer_err(e.to_string()))?;
    let mut line = String::new();
    std::io::BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| answer_err(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| answer_err(format!("not JSON: {e}")))?;
    if let Some(e) = v.get("error") {
        return Err(answer_err(e.to_string()));
    }
    Ok(line.trim().to_string())
}
