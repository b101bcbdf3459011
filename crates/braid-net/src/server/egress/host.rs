//! The server's own addresses for the egress policy: every address on its interfaces and
//! the broadcast addresses of its IPv4 networks (`getifaddrs`), read again at most every
//! [`HOST_TTL`], so an address added while the server runs is refused within that time.
//!
//! Owns: reading and caching [`HostAddrs`]. Must not touch: the decision (`policy`).

use super::policy::HostAddrs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How long the interface addresses read are used before they are read again.
pub const HOST_TTL: std::time::Duration = std::time::Duration::from_secs(2);

/// The addresses of this machine's interfaces, now.
pub fn read() -> std::io::Result<HostAddrs> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we own and free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut host = HostAddrs::default();
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*at };
        let broadcast = ifa.ifa_flags & libc::IFF_BROADCAST as u32 != 0;
        if let Some(a) = sockaddr_ip(ifa.ifa_addr) {
            host.own.push(a);
        }
        if let (true, Some(b @ IpAddr::V4(_))) = (broadcast, sockaddr_ip(ifa.ifa_ifu)) {
            host.broadcast.push(b);
        }
        at = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs allocated, freed once.
    unsafe { libc::freeifaddrs(head) };
    host.own.sort();
    host.own.dedup();
    host.broadcast.sort();
    host.broadcast.dedup();
    Ok(host)
}

/// The IPv4 or IPv6 address in `sa`, if it holds one.
fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a non-null sockaddr of getifaddrs, read as the type its family names.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let v4 = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let v6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

/// [`read`] at most once a [`HOST_TTL`]; what was read last while a read fails.
#[derive(Debug, Default)]
pub struct HostCache {
    last: Mutex<Option<(Instant, Arc<HostAddrs>)>>,
}

impl HostCache {
    /// The server's addresses.
    pub fn get(&self) -> Arc<HostAddrs> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, h)) = &*last {
            if at.elapsed() < HOST_TTL {
                return h.clone();
            }
        }
        let h = match read() {
            Ok(h) => Arc::new(h),
            Err(e) => {
                tracing::warn!("reading this server's addresses for the egress policy: {e}; using the last ones read");
                last.as_ref().map(|(_, h)| h.clone()).unwrap_or_default()
            }
        };
        *last = Some((Instant::now(), h.clone()));
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every machine has loopback: the reader finds it (and so would find any other).
    #[test]
    fn the_interface_addresses_include_loopback() {
        let h = read().unwrap();
        assert!(h.own.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{h:?}");
        assert!(h.broadcast.iter().all(IpAddr::is_ipv4));
    }
}
