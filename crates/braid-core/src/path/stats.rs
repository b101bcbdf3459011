//! What a path reports and what it costs: its counters (`PathStats`), the cost set locally or
//! told by the peer (`PathCost`), and the conversion of a rate given at the IP layer into
//! the UDP payload bytes the session counts in.
//!
//! Owns: these plain types. Must not touch: the path's state (the path fills the counters).

/// Counters of one path, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Packets sent.
    pub packets_sent: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// Packets received.
    pub packets_received: u64,
    /// UDP payload bytes received.
    pub bytes_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Stream bytes sent that had been sent before (on any path).
    pub retransmitted_bytes: u64,
    /// Stream bytes sent for the first time.
    pub stream_bytes_sent: u64,
    /// Probe timeouts.
    pub ptos: u64,
    /// Congestion window now.
    pub cwnd: u64,
    /// Smoothed RTT now, microseconds.
    pub srtt_us: u64,
    /// Losses judged random (isolated, no queue build-up): the window was not cut.
    pub random_losses: u64,
    /// Blackouts confirmed on this path or reported by the peer (the path was frozen).
    pub blackouts: u64,
    /// Acknowledgements of this path carried on another path's uplink (ACK offload).
    pub acks_offloaded: u64,
    /// Packets declared lost and acknowledged after all (reordering, not loss).
    pub spurious_losses: u64,
    /// Window cuts undone because every loss behind them proved spurious.
    pub undone_cuts: u64,
    /// The packet threshold of loss detection now (raised by reordering).
    pub packet_threshold: u64,
    /// The largest datagram (UDP payload) the path carries now, as its discovery found it.
    pub datagram_size: u64,
    /// Times its datagram size dropped because full-size packets fell into a black hole.
    pub datagram_black_holes: u64,
}

/// What using a path costs, as set locally or told by the peer (PATH_COST).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCost {
    /// Power the interface draws while active, above its idle power, milliwatts.
    pub power_mw: u64,
    /// The path's rate if known, kbit/s at the IP layer (0: unknown, estimate it).
    pub rate_kbps: u64,
}

/// IPv4 and UDP headers, which a rate given at the IP layer also carries.
pub const IP_UDP_OVERHEAD: u64 = 28;

/// A rate at the IP layer (kbit/s) as UDP payload bytes per second for full-size packets
/// of `mss` bytes, the unit the session counts in.
pub fn ip_kbps_to_payload_bytes(kbps: u64, mss: u64) -> u64 {
    let bytes = kbps as u128 * 1000 / 8 * mss as u128 / (mss + IP_UDP_OVERHEAD) as u128;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}
