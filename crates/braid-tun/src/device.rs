//! The TUN device: created by name, given its MTU and addresses and brought up; packets are
//! read and written on its descriptor. The device is not persistent: it disappears with the
//! descriptor, so a killed agent leaves no device behind.
//!
//! Owns: `/dev/net/tun`, the device's link settings and addresses. Must not touch: routes
//! and rules (that is `routing`), packet contents.

use crate::netlink::{Mode, Netlink};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// Why the TUN device could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "cannot create TUN device {name:?}: permission denied; braid agent --tun needs \
         CAP_NET_ADMIN (run it as root, or grant it: setcap cap_net_admin+ep $(which braid))"
    )]
    Permission { name: String },
    #[error("cannot create TUN device {name:?}: {source} (is /dev/net/tun there? modprobe tun)")]
    Open { name: String, source: io::Error },
    #[error(
        "TUN device {name:?} is in use by another process (another braid agent?) and stayed \
         so for 2 s: stop that process, or give this agent's device another name"
    )]
    Busy { name: String },
    #[error("TUN device name {0:?} is not valid: 1 to 15 bytes, no '/', no spaces")]
    BadName(String),
    #[error("cannot set up TUN device {name:?}: {what}: {source}")]
    Setup {
        name: String,
        what: String,
        source: io::Error,
    },
}

/// An open TUN device (layer 3, no packet information header).
pub struct TunDevice {
    file: File,
    name: String,
    index: u32,
}

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// How long [`TunDevice::create`] waits for a device of its name that is still attached
/// elsewhere (see there) before it reports it busy.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl TunDevice {
    /// Creates the device `name` (or opens it, if a persistent one exists), sets its MTU
    /// and addresses (`addr/prefix`), and brings it up.
    pub fn create(name: &str, mtu: u32, addrs: &[(IpAddr, u8)]) -> Result<TunDevice, DeviceError> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
            return Err(DeviceError::BadName(name.into()));
        }
        let open_err = |source: io::Error| {
            if source.kind() == io::ErrorKind::PermissionDenied {
                DeviceError::Permission { name: name.into() }
            } else if source.raw_os_error() == Some(libc::EBUSY) {
                DeviceError::Busy { name: name.into() }
            } else {
                DeviceError::Open {
                    name: name.into(),
                    source,
                }
            }
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open("/dev/net/tun")
            .map_err(open_err)?;
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // A device of this name still attached to a descriptor is busy. Right after the
        // process that held it died (an agent killed and restarted at once), or while a
        // just-forked child still shares its descriptor table until it runs `exec`, that
        // lasts moments: wait for it, up to BUSY_WAIT.
        let start = std::time::Instant::now();
        loop {
            // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `IfReq` lays out
            // (name, flags, padding to the union's size); the descriptor is open.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req) };
            if rc >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) || start.elapsed() >= BUSY_WAIT {
                return Err(open_err(e));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let cname = CString::new(name).map_err(|_| DeviceError::BadName(name.into()))?;
        // SAFETY: a valid NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        let dev = TunDevice {
            file,
            name: name.into(),
            index,
        };
        dev.configure(mtu, addrs)?;
        Ok(dev)
    }

    fn configure(&self, mtu: u32, addrs: &[(IpAddr, u8)]) -> Result<(), DeviceError> {
        let fail = |what: String| {
            let name = self.name.clone();
            move |source| DeviceError::Setup { name, what, source }
        };
        let mut nl = Netlink::open().map_err(fail("netlink".into()))?;
        for &(ip, prefix) in addrs {
            let mut m = AddressMessage::default();
            m.header.family = if ip.is_ipv4() {
                AddressFamily::Inet
            } else {
                AddressFamily::Inet6
            };
            m.header.prefix_len = prefix;
            m.header.index = self.index;
            m.attributes.push(AddressAttribute::Local(ip));
            m.attributes.push(AddressAttribute::Address(ip));
            match nl.request(RouteNetlinkMessage::NewAddress(m), Mode::Create) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                    return Err(fail(format!("address {ip}/{prefix}"))(e));
                }
                _ => {}
            }
        }
        let mut m = LinkMessage::default();
        m.header.index = self.index;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        m.attributes.push(LinkAttribute::Mtu(mtu));
        nl.request(RouteNetlinkMessage::SetLink(m), Mode::Change)
            .map_err(fail(format!("MTU {mtu} and up")))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel's index of the device (routes name it).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// One packet into `buf`; `WouldBlock` when none is waiting (the descriptor is
    /// non-blocking: poll it for readability).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.file).read(buf)
    }

    /// One packet to the kernel.
    pub fn send(&self, packet: &[u8]) -> io::Result<usize> {
        (&self.file).write(packet)
    }
}

impl AsRawFd for TunDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
