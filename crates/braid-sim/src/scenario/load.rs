//! Loading a scenario: the entry points (a file, TOML text, a parsed table) and the
//! translation of serde's errors into `ScenarioError`s with key and line.
//!
//! Owns: reading the file and locating deserialisation errors. Must not touch: what a valid
//! scenario is (`resolve.rs` and its siblings).

use super::raw::RawScenario;
use super::resolve::Resolver;
use super::{Scenario, ScenarioError};
use std::collections::HashMap;
use std::path::Path;

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ScenarioError::new(path, "", format!("cannot read the scenario file: {e}"))
        })?;
        Scenario::from_toml_str(&text, path)
    }

    /// Parses and validates scenario text; `file` is used in messages and trace paths are
    /// resolved relative to its directory.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Scenario, ScenarioError> {
        let de = toml::Deserializer::new(text);
        Scenario::from_deserializer(de, text, file)
    }

    /// Validates an already parsed scenario table (a sweep point); errors name keys but no
    /// lines.
    pub fn from_toml_value(value: toml::Value, file: &Path) -> Result<Scenario, ScenarioError> {
        Scenario::from_deserializer(value, "", file)
    }

    fn from_deserializer<'de, D: serde::Deserializer<'de>>(
        de: D,
        text: &str,
        file: &Path,
    ) -> Result<Scenario, ScenarioError>
    where
        D::Error: SpannedError,
    {
        let raw: RawScenario = serde_path_to_error::deserialize(de).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            let line = inner
                .span()
                .filter(|_| !text.is_empty())
                .map(|s| text.get(..s.start).map_or(0, |p| p.matches('\n').count()) + 1);
            let key = if path == "." || path == "?" {
                String::new()
            } else {
                path
            };
            let full = inner.message();
            let message: Vec<&str> = full.lines().map(str::trim).collect();
            let message = message.join("; ");
            let syntax = key.is_empty()
                && !message.starts_with("unknown field")
                && !message.starts_with("missing");
            let message = if syntax {
                format!("TOML syntax error: {message}")
            } else {
                message
            };
            ScenarioError {
                file: file.to_path_buf(),
                key,
                line,
                message,
            }
        })?;
        Resolver {
            file,
            traces: HashMap::new(),
        }
        .scenario(raw)
    }
}

/// What the scenario loader needs of a deserializer's error: where it was and what it says.
trait SpannedError: serde::de::Error {
    fn span(&self) -> Option<std::ops::Range<usize>>;
    fn message(&self) -> String;
}

impl SpannedError for toml::de::Error {
    fn span(&self) -> Option<std::ops::Range<usize>> {
        toml::de::Error::span(self)
    }
    fn message(&self) -> String {
        toml::de::Error::message(self).to_string()
    }
}
