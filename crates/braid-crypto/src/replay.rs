//! Per-path replay protection for transport packets.
//!
//! Owns: [`ReplayWindow`], a 1024-packet sliding bitmap of the packet numbers already
//! accepted on one path (one window per path and per receiving session).
//!
//! Must not touch: decryption, loss detection or acknowledgements (the core keeps its own
//! record of received packets for ACKs; this window only stops an attacker from replaying
//! authentic packets).
//!
//! Order of use: the driver calls [`ReplayWindow::check_and_set`] only *after*
//! [`crate::PacketKey::open_in_place`] succeeded. Calling it before would let a forged
//! packet (which fails authentication) mark its packet number as seen and so block the
//! authentic packet with that number. [`ReplayWindow::would_accept`] may be used before
//! opening to skip the decryption of an obvious duplicate.

/// Number of packet numbers the window remembers below the largest one seen.
pub const WINDOW: u64 = 1024;

const WORDS: usize = (WINDOW / 64) as usize;

/// A sliding window over the packet numbers of one path.
///
/// Accepts each packet number at most once; refuses anything 1024 or more below the largest
/// packet number accepted so far (too old to tell whether it was seen).
#[derive(Debug, Clone, Default)]
pub struct ReplayWindow {
    /// Largest packet number accepted so far; `None` before the first.
    largest: Option<u64>,
    /// Bit `pn % 1024` is set when `pn` (within the window) was accepted.
    bits: [u64; WORDS],
}

impl ReplayWindow {
    /// An empty window: every packet number is new.
    pub fn new() -> ReplayWindow {
        ReplayWindow::default()
    }

    /// The largest packet number accepted so far.
    pub fn largest(&self) -> Option<u64> {
        self.largest
    }

    fn bit(pn: u64) -> (usize, u64) {
        let i = pn % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// True when `pn` would be accepted by [`check_and_set`](Self::check_and_set) now.
    /// Changes nothing.
    pub fn would_accept(&self, pn: u64) -> bool {
        match self.largest {
            None => true,
            Some(largest) if pn > largest => true,
            Some(largest) => {
                if largest - pn >= WINDOW {
                    return false;
                }
                let (w, m) = Self::bit(pn);
                self.bits[w] & m == 0
            }
        }
    }

    /// Record `pn` as received. Returns false (and changes nothing) if it is a duplicate or
    /// 1024 or more below the largest packet number accepted so far; the packet must then
    /// be dropped. Call only after the packet authenticated.
    pub fn check_and_set(&mut self, pn: u64) -> bool {
        if !self.would_accept(pn) {
            return false;
        }
        match self.largest {
            Some(largest) if pn <= largest => {}
            Some(largest) => {
                // Slide: forget the packet numbers that fall out of the window, which are
                // exactly the slots that `largest + 1 ..= pn` will reuse.
                if pn - largest >= WINDOW {
                    self.bits = [0; WORDS];
                } else {
                    for old in largest + 1..=pn {
                        let (w, m) = Self::bit(old);
                        self.bits[w] &= !m;
                    }
                }
                self.largest = Some(pn);
            }
            None => self.largest = Some(pn),
        }
        let (w, m) = Self::bit(pn);
        self.bits[w] |= m;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order() {
        let mut w = ReplayWindow::new();
        for pn in 0..5000 {
            assert!(w.check_and_set(pn), "pn {pn}");
        }
        assert_eq!(w.largest(), Some(4999));
    }

    #[test]
    fn duplicates_refused() {
        let mut w = ReplayWindow::new();
        assert!(w.check_and_set(0));
        assert!(!w.check_and_set(0));
        assert!(w.check_and_set(10));
        assert!(!w.check_and_set(10));
        assert!(!w.check_and_set(0));
        assert!(w.check_and_set(5));
        assert!(!w.check_and_set(5));
    }

    #[test]
    fn out_of_order_within_window() {
        let mut w = ReplayWindow::new();
        assert!(w.check_and_set(2000));
        // Everything in (2000 - 1024, 2000) is new exactly once, in any order.
        for pn in (977..2000).rev() {
            assert!(w.would_accept(pn));
            assert!(w.check_and_set(pn), "pn {pn}");
            assert!(!w.check_and_set(pn), "pn {pn} twice");
        }
        assert!(!w.check_and_set(976), "1024 below the largest is too old");
    }

    #[test]
    fn too_old() {
        let mut w = ReplayWindow::new();
        assert!(w.check_and_set(5000));
        assert!(!w.would_accept(5000 - WINDOW));
        assert!(!w.check_and_set(5000 - WINDOW));
        assert!(!w.check_and_set(0));
        assert!(w.check_and_set(5000 - WINDOW + 1));
    }

    #[test]
    fn sliding_forgets_old_slots_correctly() {
        let mut w = ReplayWindow::new();
        assert!(w.check_and_set(1));
        // 1 + 1024 reuses the slot of 1; it must count as new, and 1 is now too old.
        assert!(w.check_and_set(1 + WINDOW));
        assert!(!w.check_and_set(1));
        // Jump by more than the window: everything below is forgotten, nothing stale left.
        assert!(w.check_and_set(10 * WINDOW + 3));
        for pn in 9 * WINDOW + 4..10 * WINDOW + 3 {
            assert!(w.would_accept(pn), "pn {pn}");
        }
        assert!(!w.check_and_set(10 * WINDOW + 3));
    }

    #[test]
    fn huge_packet_numbers() {
        let mut w = ReplayWindow::new();
        assert!(w.check_and_set((1 << 62) - 1));
        assert!(!w.check_and_set((1 << 62) - 1));
        assert!(w.check_and_set((1 << 62) - 2));
        assert!(!w.check_and_set(0));
    }
}
