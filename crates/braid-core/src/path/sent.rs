//! What the sender remembers of each packet it sent on a path: its frames (to act on when
//! the packet is acknowledged or declared lost, on any path) and its size, time and stamp.
//!
//! Owns: these records. Must not touch: what the frames mean (the session decides).

use super::rate;
use crate::ids::PathId;
use crate::stream::StreamId;
use crate::time::Instant;
use smallvec::SmallVec;

/// A frame remembered in a sent packet, to act on when the packet is acked or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SentFrame {
    Stream {
        id: StreamId,
        off: u64,
        len: u32,
        fin: bool,
    },
    Ack {
        path: PathId,
        largest: u64,
    },
    MaxData,
    MaxStreamData(StreamId),
    MaxStreams,
    ResetStream(StreamId),
    StopSending(StreamId),
    PathStatus(PathId),
    PathAbandon(PathId),
    PathBlackout(PathId),
    PathCost(PathId),
    PathName(PathId),
    /// ACK_FREQUENCY for a path, with its sequence number.
    AckFrequency(PathId, u64),
    Hello,
    PathChallenge(PathId),
}

/// A packet in flight (or an ack-only packet awaiting its fate).
#[derive(Debug, Clone)]
pub(crate) struct SentPacket {
    /// The path it was sent on.
    pub path: PathId,
    /// Its packet number on that path.
    pub pn: u64,
    pub time_sent: Instant,
    pub size: u32,
    pub ack_eliciting: bool,
    pub in_flight: bool,
    pub frames: SmallVec<[SentFrame; 3]>,
    /// The path's delivery state when it was sent (rate samples).
    pub(crate) stamp: rate::Stamp,
    /// Its stream data was already queued on other paths after a probe timeout.
    pub reinjected: bool,
    /// Declared lost and judged a random (not a congestion) loss: the window was kept.
    pub random_loss: bool,
    /// The loss episode it was declared lost in (0: none).
    pub(super) episode: u64,
}
