//! braid-testbed's integration tests, in one binary: the namespace testbed and the TUN agent
//! (root only; each says why it skips otherwise).

mod tunrig;

mod address;
mod calls;
mod ipv6;
mod nat64;
mod responsive;
mod testbed;
mod tun;

/// The testbed's tests and the TUN tests each hold the machine-wide run lock
/// (`/run/braid-testbed.lock`) while they run: one at a time in this process too.
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
