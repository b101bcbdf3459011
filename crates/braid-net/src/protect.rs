//! Packet protection with the session keys of the Noise handshake: ChaCha20-Poly1305 on
//! every transport packet (header as associated data) and a per-path replay window.
//!
//! Owns: turning braid-crypto's keys into the driver's [`PacketProtection`]. Must not
//! touch: the handshake itself or the session.

use crate::driver::PacketProtection;
use braid_crypto::{parse_header, PacketType, ReplayWindow, SessionKeys};
use std::collections::HashMap;

/// AEAD protection of one session.
pub struct Aead {
    keys: SessionKeys,
    windows: HashMap<u8, ReplayWindow>,
}

impl Aead {
    /// Protection with these keys.
    pub fn new(keys: SessionKeys) -> Self {
        Aead {
            keys,
            windows: HashMap::new(),
        }
    }
}

impl PacketProtection for Aead {
    fn seal(&mut self, packet: &mut [u8]) -> bool {
        let Ok(h) = parse_header(packet) else {
            return false;
        };
        self.keys.send.seal_in_place(packet, h.header_len).is_ok()
    }

    fn open(&mut self, packet: &mut [u8]) -> bool {
        let Ok(h) = parse_header(packet) else {
            return false;
        };
        if h.ptype != PacketType::Transport {
            return false;
        }
        if self.keys.recv.open_in_place(packet, h.header_len).is_err() {
            return false;
        }
        // At most 8 paths are live, but ids are up to 255: bound the map anyway.
        if self.windows.len() > 256 {
            self.windows.clear();
        }
        self.windows
            .entry(h.path_id)
            .or_default()
            .check_and_set(h.packet_number)
    }
}

/// No protection (tests and benchmarks of the transport alone).
#[derive(Debug, Default)]
pub struct Plain;

impl PacketProtection for Plain {
    fn seal(&mut self, _: &mut [u8]) -> bool {
        true
    }
    fn open(&mut self, _: &mut [u8]) -> bool {
        true
    }
}
