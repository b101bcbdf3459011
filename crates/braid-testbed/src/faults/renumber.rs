//! Address changes during a transfer (`--fault addr:PATH:AT`): the client's address on a
//! path is renumbered as a DHCP client does when its lease changes. The old address goes
//! (and with it the routes that named it as their source), the next address of the same
//! subnet comes ([`renumbered`]), and the path's policy rule and its route to the server's
//! subnet follow it. The link stays up throughout. When the transfer ends (or the injector
//! is dropped) the old address is put back the same way, so every transfer starts on the
//! topology as it was built.
//!
//! Who can follow: a `braid agent` path given by its interface (`--path NAME=IFACE`; the
//! runner does so for a path with an address fault) sees the address go and come and moves
//! its path; a socket bound to the old address (plain TCP, an MPTCP subflow, the probe of a
//! kernel variant) loses it. MPTCP's endpoints are not updated (no path manager daemon).
//!
//! Owns: the schedule thread and the renumbering commands. Must not touch: the measures
//! (`faults`), the link emulators, the variants' stacks.

use super::{wait_until, Fault, FaultKind, ScheduleThread};
use crate::error::Result;
use crate::netns::{PathLink, Topology};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The address a path's client address is changed to: the next one in its /24 (10.1.0.1
/// becomes 10.1.0.2; .254 wraps to .1).
pub fn renumbered(ip: Ipv4Addr) -> Ipv4Addr {
    let [a, b, c, d] = ip.octets();
    Ipv4Addr::new(a, b, c, if d >= 254 { 1 } else { d + 1 })
}

/// Address changes of one transfer: a thread renumbers each path at its time; dropping it
/// (or [`AddressFaults::finish`]) puts every changed address back.
pub struct AddressFaults(ScheduleThread);

impl AddressFaults {
    /// Starts the schedule now (the transfer's start): `(path, at)` in the client
    /// namespace `ns`. A path changed twice goes back to its first address.
    pub fn start(ns: &str, changes: Vec<(PathLink, Duration)>) -> Result<AddressFaults> {
        let ns = ns.to_string();
        let thread = ScheduleThread::spawn("address-faults", move |st, t0| {
            let mut changes = changes;
            changes.sort_by_key(|c| c.1);
            // Each path's address now, by path index.
            let mut now: Vec<(usize, Ipv4Addr, Ipv4Addr)> = Vec::new();
            for (link, at) in &changes {
                if !wait_until(st, t0, *at) {
                    break;
                }
                let cur = match now.iter().position(|c| c.0 == link.index) {
                    Some(k) => &mut now[k],
                    None => {
                        now.push((link.index, link.client_ip, link.client_ip));
                        now.last_mut().expect("just pushed")
                    }
                };
                let to = if cur.2 == link.client_ip {
                    renumbered(link.client_ip)
                } else {
                    link.client_ip
                };
                renumber(&ns, link, cur.2, to);
                cur.2 = to;
            }
            // Put back when the transfer ends.
            while !st.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            for (link, _) in &changes {
                if let Some(c) = now.iter_mut().find(|c| c.0 == link.index) {
                    if c.2 != c.1 {
                        renumber(&ns, link, c.2, c.1);
                        c.2 = c.1;
                    }
                }
            }
        })?;
        Ok(AddressFaults(thread))
    }

    /// Stops the schedule; every address is back when it returns.
    pub fn finish(self) {
        self.0.finish();
    }
}

/// Moves path `l`'s client address from `from` to `to` in namespace `ns`: the address, the
/// policy rule of its source (table 100 + the path's index, as `netns` builds it) and the
/// main table's route to the server's subnet. Failures are reported on stderr (a fault
/// half-applied is still a fault; the measures show what it did).
fn renumber(ns: &str, l: &PathLink, from: Ipv4Addr, to: Ipv4Addr) {
    let table = (100 + l.index).to_string();
    let snet = Ipv4Addr::from(u32::from(l.server_ip) & 0xffff_ff00);
    let (from_s, to_s) = (from.to_string(), to.to_string());
    let steps: [&[&str]; 5] = [
        &["addr", "del", &format!("{from}/24"), "dev", &l.client_if],
        &["rule", "del", "from", &from_s, "table", &table],
        &["addr", "add", &format!("{to}/24"), "dev", &l.client_if],
        &["rule", "add", "from", &to_s, "table", &table],
        &[
            "route",
            "replace",
            &format!("{snet}/24"),
            "dev",
            &l.client_if,
            "src",
            &to_s,
        ],
    ];
    for args in steps {
        if let Err(e) = crate::cmd::ip_ns(ns, args) {
            eprintln!("braid testbed: address change on {}: {e}", l.client_if);
        }
    }
}

/// The address faults among `faults` as [`AddressFaults::start`] takes them: the path's
/// link and when.
pub fn address_schedule(topo: &Topology, faults: &[(Fault, usize)]) -> Vec<(PathLink, Duration)> {
    faults
        .iter()
        .filter(|(f, _)| f.kind == FaultKind::Address)
        .filter_map(|(f, i)| {
            let at = Duration::try_from_secs_f64(f.at_s).unwrap_or(Duration::ZERO);
            Some((topo.paths.get(*i)?.clone(), at))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_address_stays_in_its_subnet() {
        assert_eq!(
            renumbered(Ipv4Addr::new(10, 1, 0, 1)),
            Ipv4Addr::new(10, 1, 0, 2)
        );
        assert_eq!(
            renumbered(Ipv4Addr::new(10, 1, 0, 254)),
            Ipv4Addr::new(10, 1, 0, 1)
        );
    }
}
