//! Faults on the rig's links, for tests that time them themselves: a silent black hole (the
//! link drops every frame both ways while both ends keep their carrier, as a WiFi link whose
//! access point stops forwarding) and a carrier loss (the emulator's interface towards the
//! client goes down, so the client's interface loses its carrier, as when a cable is pulled).
//!
//! Both act in the emulator namespace on the path's two interfaces there. A [`LinkFault`] is
//! a plain value (names only): a script on another thread may hold it.

use super::Rig;
use braid_testbed::cmd::{ip_ns, run};

/// One path's link in the emulator namespace.
#[derive(Debug, Clone)]
pub struct LinkFault {
    ns: String,
    /// Towards the client, towards the server.
    devs: [String; 2],
}

impl Rig {
    /// The faults of path `i`'s link.
    pub fn link_fault(&self, i: usize) -> LinkFault {
        let p = &self.topo.paths[i];
        LinkFault {
            ns: self.topo.emu.clone(),
            devs: [p.emu_client_if.clone(), p.emu_server_if.clone()],
        }
    }
}

impl LinkFault {
    /// Starts (`true`) or ends a silent black hole: the bridge stops forwarding at the
    /// link's two ports (port state `disabled`); the interfaces, their carrier and their
    /// queues stay as they are. Kernel links only ([`Rig::new_shaped`]: the emulator's
    /// links black-hole by their scenario's blackouts). (This kernel has no tc drop action:
    /// the bridge's port state is the silent switch.)
    pub fn black_hole(&self, on: bool) {
        // Port states: 0 disabled, 3 forwarding.
        let state = if on { "0" } else { "3" };
        for dev in &self.devs {
            let args = ["-n", &self.ns, "link", "set", "dev", dev, "state", state];
            if let Err(e) = run("bridge", &args) {
                panic!("black hole: port {dev} {state}: {e}");
            }
        }
    }

    /// Takes the carrier of the client's interface away (`false`) or gives it back.
    pub fn carrier(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        if let Err(e) = ip_ns(&self.ns, &["link", "set", "dev", &self.devs[0], state]) {
            panic!("carrier {state} on {}: {e}", self.devs[0]);
        }
    }
}
