//! Which key a setting needs, for the message when a file of the wrong kind is given.
//! braid-crypto's own advice ("give the other half of the same pair") is wrong when the
//! file given is the other machine's: a packaged install makes both pairs on every
//! machine, so `key = "server.pub"` on the router would be told to use
//! /etc/braid/server.key, the server's private key. Here each setting says whose key it
//! needs and where that is.
//!
//! Owns: those messages. Must not touch: reading keys (braid-crypto).

use braid_crypto::KeyError;
use std::path::Path;

/// A key setting of the commands.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeySetting {
    /// The agent's `key`: its own private key.
    AgentKey,
    /// The server's `key`: its own private key.
    ServerKey,
    /// The agent's `server_pub`: the server's public key.
    ServerPub,
}

impl KeySetting {
    /// What belongs in the setting, and where to find it.
    fn advice(self, dir: &Path) -> String {
        let at = |f: &str| dir.join(f).display().to_string();
        match self {
            KeySetting::AgentKey => format!(
                "`key` of an agent is this agent's own private key: agent.key ({} on a \
                 packaged install, or make a pair with `braid keygen --out agent`), never \
                 the server's key",
                at("agent.key")
            ),
            KeySetting::ServerKey => format!(
                "`key` of a server is this server's own private key: server.key ({} on a \
                 packaged install, or make a pair with `braid keygen --out server`)",
                at("server.key")
            ),
            KeySetting::ServerPub => "`server_pub` is the server's public key: its server.pub \
                 (`cat /etc/braid/server.pub` on the server), as a file here or the key itself"
                .to_string(),
        }
    }

    /// The name of the other role's key files (`server` for the agent's own key).
    fn other_role(self) -> &'static str {
        match self {
            KeySetting::AgentKey => "server",
            KeySetting::ServerKey | KeySetting::ServerPub => "agent",
        }
    }

    /// `e`, with the advice of this setting when the file was of the wrong kind and its
    /// other half is the other role's key (`server.pub` given as an agent's `key`); else
    /// braid-crypto's advice (the other half of the same pair) stands.
    pub(crate) fn explain(self, e: KeyError) -> KeyError {
        match e {
            KeyError::WrongKind { path, holds, what }
                if path.file_stem().and_then(|s| s.to_str()) != Some(self.other_role()) =>
            {
                KeyError::WrongKind { path, holds, what }
            }
            KeyError::WrongKind { path, holds, .. } => {
                let dir = match self {
                    // A packaged install's folder.
                    KeySetting::AgentKey | KeySetting::ServerKey => Path::new("/etc/braid"),
                    KeySetting::ServerPub => Path::new(""),
                };
                KeyError::WrongKind {
                    what: self.advice(dir),
                    path,
                    holds,
                }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 38, item 14: the server's public key given as the agent's `key` was answered
    /// "give the .key file of the same pair (/etc/braid/server.key)", the server's private
    /// key. The advice names the agent's own key and warns off the server's.
    #[test]
    fn the_servers_public_key_as_the_agents_key_is_not_answered_with_the_servers_private_key() {
        let dir = tempfile::tempdir().unwrap();
        let (_, public) = braid_crypto::write_keypair(dir.path().join("server")).unwrap();
        let e = braid_crypto::read_private_key(&public).unwrap_err();
        let msg = KeySetting::AgentKey.explain(e).to_string();
        assert!(
            msg.contains("server.pub: this is a public key file"),
            "{msg}"
        );
        assert!(msg.contains("/etc/braid/agent.key"), "{msg}");
        assert!(!msg.contains("server.key"), "{msg}");
        // The agent's private key given as `server_pub`.
        let (key, _) = braid_crypto::write_keypair(dir.path().join("agent")).unwrap();
        let e = braid_crypto::read_public_key(&key).unwrap_err();
        let msg = KeySetting::ServerPub.explain(e).to_string();
        assert!(msg.contains("the server's public key"), "{msg}");
        assert!(!msg.contains("agent.pub"), "{msg}");
        // The same through an agent's configuration file.
        let file = dir.path().join("agent.toml");
        let text = "server = \"127.0.0.1:4433\"\nserver_pub = \"server.pub\"\nkey = \"server.pub\"\npath = [\"a=lo\"]\nsocks = \"127.0.0.1:0\"\n";
        std::fs::write(&file, text).unwrap();
        let args = crate::net::AgentArgs {
            config: Some(file),
            ..Default::default()
        };
        let msg = format!("{:#}", crate::net::agent_settings(args).err().unwrap());
        assert!(
            msg.contains("agent.key") && !msg.contains("server.key"),
            "{msg}"
        );
    }
}
