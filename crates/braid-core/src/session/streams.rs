//! The session's streams as the application uses them: open, write, finish, reset, stop,
//! read, and their garbage collection.
//!
//! Owns: the stream half of [`Session`]'s public API. Must not touch: stream internals
//! (`crate::stream`), how stream data goes into packets (`send`) or how frames reach a
//! stream (`recv`).

use super::*;

/// A stream that becomes sendable with at most this many bytes counts as sparse and goes to
/// the front of the send queue.
const SPARSE_BYTES: u64 = 8 * 1024;

impl Session {
    pub(super) fn stream_is_local(&self, id: StreamId) -> bool {
        initiated_by_client(id) == (self.side == Side::Client)
    }

    pub(super) fn new_stream_state(&self) -> StreamState {
        let peer_window = self.peer_params.map_or(0, |p| p.max_stream_data);
        StreamState {
            send: SendStream::new(peer_window, self.cfg.send_buffer),
            recv: RecvStream::new(self.cfg.stream_window),
            queued: false,
            blocked_write: false,
            readable_signalled: false,
            sent_signalled: false,
        }
    }

    /// Open a new bidirectional stream.
    pub fn open_stream(&mut self) -> Result<StreamId, StreamError> {
        if self.state != State::Established || self.next_local_stream >= self.peer_max_streams {
            return Err(StreamError::Limit);
        }
        let bit = if self.side == Side::Client { 0 } else { 1 };
        let id = self.next_local_stream * 2 + bit;
        self.next_local_stream += 1;
        let st = self.new_stream_state();
        self.streams.insert(id, st);
        Ok(id)
    }

    /// Buffer application data on a stream; returns how many bytes were taken (0 when the
    /// buffer is full: a `StreamWritable` event follows when there is room again).
    pub fn stream_write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        self.stream_append(id, data.len(), |s| s.write(data))
    }

    /// Buffer application data on a stream without copying it: as [`Self::stream_write`],
    /// taking the front of `data` (returns how many bytes).
    pub fn stream_write_bytes(&mut self, id: StreamId, data: Bytes) -> Result<usize, StreamError> {
        self.stream_append(id, data.len(), |s| s.write_bytes(data))
    }

    /// Append `len` bytes with `write` (which returns how many it took) to a stream that
    /// may still send.
    pub(super) fn stream_append(
        &mut self,
        id: StreamId,
        len: usize,
        write: impl FnOnce(&mut SendStream) -> usize,
    ) -> Result<usize, StreamError> {
        let st = self.streams.get_mut(&id).ok_or(StreamError::Unknown(id))?;
        if let Some(code) = st.send.stopped {
            return Err(StreamError::Stopped { id, code });
        }
        if st.send.fin || st.send.reset.is_some() {
            return Err(StreamError::Closed(id));
        }
        let n = write(&mut st.send);
        if n < len {
            st.blocked_write = true;
        }
        if n > 0 && !st.queued {
            st.queued = true;
            // Sparse flows first (as fq_codel's new flows): a stream that had nothing to
            // send and now has at most a few packets' worth (a request, a DNS query over
            // TCP, a keystroke) goes ahead of the streams already queued, so it waits behind
            // no bulk stream's turn; the round-robin sends it to the back once it has had one.
            if st.send.write_offset() - st.send.next_new <= SPARSE_BYTES {
                self.send_queue.push_front(id);
            } else {
                self.send_queue.push_back(id);
            }
        }
        Ok(n)
    }

    /// Bytes `stream_write` would accept now.
    pub fn stream_writable(&self, id: StreamId) -> Result<u64, StreamError> {
        let st = self.streams.get(&id).ok_or(StreamError::Unknown(id))?;
        Ok(st.send.writable())
    }

    /// Finish the sending side: the peer reads the end of the stream after the data.
    pub fn stream_finish(&mut self, id: StreamId) -> Result<(), StreamError> {
        let st = self.streams.get_mut(&id).ok_or(StreamError::Unknown(id))?;
        if st.send.reset.is_some() {
            return Err(StreamError::Closed(id));
        }
        st.send.finish();
        if !st.queued {
            st.queued = true;
            self.send_queue.push_back(id);
        }
        Ok(())
    }

    /// Abandon the sending side with an application error code.
    pub fn stream_reset(&mut self, id: StreamId, code: u64) -> Result<(), StreamError> {
        let st = self.streams.get_mut(&id).ok_or(StreamError::Unknown(id))?;
        if st.send.reset.is_some() || st.send.fin_acked {
            return Ok(());
        }
        st.send.reset = Some(code);
        let final_size = st
            .send
            .next_new
            .max(st.send.retransmit.last().map_or(0, |r| r.end));
        st.send.next_new = final_size;
        st.send.discard();
        self.pending.reset_stream.insert(id);
        self.gc_stream(id);
        Ok(())
    }

    /// Ask the peer to stop sending on a stream; data still arriving is discarded.
    pub fn stream_stop(&mut self, id: StreamId, code: u64) -> Result<(), StreamError> {
        let st = self.streams.get_mut(&id).ok_or(StreamError::Unknown(id))?;
        if st.recv.stop_sending.is_none() && st.recv.final_size.is_none() {
            st.recv.stop_sending = Some(code);
            self.pending.stop_sending.insert(id);
        }
        Ok(())
    }

    /// Read up to `max` contiguous bytes. `Ok(Some(bytes))` with data, `Ok(None)` when
    /// nothing is ready yet, `Ok(Some(empty))` once at the end of the stream.
    pub fn stream_read(&mut self, id: StreamId, max: usize) -> Result<Option<Bytes>, StreamError> {
        let st = self.streams.get_mut(&id).ok_or(StreamError::Unknown(id))?;
        if let Some(code) = st.recv.reset {
            return Err(StreamError::Reset { id, code });
        }
        st.readable_signalled = false;
        if let Some(chunk) = st.recv.read_chunk(max) {
            let n = chunk.len() as u64;
            if let Some(max) = st.recv.window_update() {
                let _ = max;
                self.pending.max_stream_data.insert(id);
            }
            self.consumed_data += n;
            if self.local_max_data.saturating_sub(self.consumed_data) < self.cfg.session_window / 2
            {
                self.local_max_data = self.consumed_data + self.cfg.session_window;
                self.pending.max_data = true;
            }
            return Ok(Some(chunk));
        }
        if st.recv.take_fin() {
            self.gc_stream(id);
            return Ok(Some(Bytes::new()));
        }
        Ok(None)
    }

    /// True once the application read the end of the stream (or the stream is gone).
    pub fn stream_is_finished(&self, id: StreamId) -> bool {
        self.streams.get(&id).is_none_or(|s| s.recv.fin_read)
    }

    /// Forget a stream when both halves are done.
    pub(super) fn gc_stream(&mut self, id: StreamId) {
        let done = self
            .streams
            .get(&id)
            .is_some_and(|s| s.send.is_done() && (s.recv.fin_read || s.recv.reset.is_some()));
        if done && !self.pending.reset_stream.contains(&id) {
            self.streams.remove(&id);
            if !self.stream_is_local(id) {
                // Let the peer open another.
                self.local_max_streams += 1;
                self.pending.max_streams = true;
            }
        }
    }

    /// Streams currently open.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Instant, Session};
    use braid_testkit::wire::{keep_all, Wire};

    /// Client and server over the kit's lossless, instant wire until the handshake is done.
    fn established() -> Session {
        let (cfg, now) = (Config::default(), Instant(0));
        let mut c = Session::connect(cfg.clone(), now, 7, 0);
        let mut s = Session::accept(cfg, now, 7);
        let mut wire = Wire::new(std::time::Duration::ZERO);
        for _ in 0..200 {
            if c.is_established() && s.is_established() {
                break;
            }
            wire.step(&mut c, &mut s, &mut keep_all);
        }
        assert!(c.is_established());
        c
    }

    #[test]
    fn a_sparse_stream_goes_ahead_of_queued_bulk_streams() {
        let mut c = established();
        let bulk: Vec<_> = (0..3).map(|_| c.open_stream().unwrap()).collect();
        for &b in &bulk {
            assert_eq!(c.stream_write(b, &[1u8; 200_000]).unwrap(), 200_000);
        }
        let request = c.open_stream().unwrap();
        c.stream_write(request, b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(c.send_queue.front(), Some(&request), "{:?}", c.send_queue);
        // A stream that arrives with bulk data of its own queues behind the others.
        let upload = c.open_stream().unwrap();
        c.stream_write(upload, &[2u8; 100_000]).unwrap();
        assert_eq!(c.send_queue.back(), Some(&upload));
        assert_eq!(c.send_queue.len(), 5);
    }
}
