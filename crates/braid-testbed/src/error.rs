//! The testbed's error type.
//!
//! Owns: `TestbedError`, whose messages say what failed, where (the command, file, namespace
//! or variant) and what to do about it. Must not touch: anything else; errors are made by the
//! module that knows the context.

use braid_sim::ScenarioError;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while building, running or tearing down a testbed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// Not running as root.
    #[error(
        "the testbed needs root: it creates network namespaces, veth links and raw packet \
         sockets (effective uid is {uid}); run it as root, e.g. with sudo"
    )]
    NotRoot {
        /// The effective user id.
        uid: u32,
    },
    /// Another run holds the lock.
    #[error(
        "another testbed run (PID {pid}) is active: it holds {lock}; wait for it to finish, \
         or stop it (kill -INT {pid}) if it is stuck"
    )]
    Busy {
        /// The PID written in the lock file.
        pid: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock file could not be created or locked.
    #[error("cannot use the lock file {path}: {source}; check that /run is writable")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A command ran but failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status.
        status: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// A command could not be started.
    #[error("cannot start `{command}`: {source}; is it installed and on PATH?")]
    Spawn {
        /// The command line.
        command: String,
        /// The cause.
        source: io::Error,
    },
    /// A system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, and where.
        what: String,
        /// The cause.
        source: io::Error,
    },
    /// The scenario cannot run on the testbed.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A required tool is missing and could not be installed.
    #[error(
        "`{tool}` is missing and installing the Debian package `{package}` failed: {detail}; \
         install it by hand (apt-get install -y {package})"
    )]
    MissingTool {
        /// The program.
        tool: String,
        /// The Debian package that has it.
        package: String,
        /// Why the installation failed.
        detail: String,
    },
    /// The kernel lacks a feature.
    #[error("this kernel lacks {what} ({detail}); {hint}")]
    Unsupported {
        /// The feature.
        what: String,
        /// What was observed.
        detail: String,
        /// What to do.
        hint: String,
    },
    /// A helper process (braid agent/server, shadowsocks) failed.
    #[error("{what} did not come up within {secs} s; its log ({log}) ends with: {tail}")]
    Helper {
        /// Which helper.
        what: String,
        /// How long we waited.
        secs: u64,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        tail: String,
    },
    /// The run was interrupted by a signal; everything was torn down.
    #[error("interrupted by {0}; every namespace, link and process of the run was removed")]
    Interrupted(&'static str),
    /// Anything else, with its context.
    #[error("{0}")]
    Other(String),
}

impl TestbedError {
    /// An I/O error with context.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        TestbedError::Io {
            what: what.into(),
            source,
        }
    }
}

/// The testbed's result type.
pub type Result<T, E = TestbedError> = std::result::Result<T, E>;
