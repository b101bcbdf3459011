//! The transfer application: one transfer on a new stream (request, response, payload
//! generation and hashing), and the reverse transfer that may run beside it.
//!
//! Owns: the application's side of the streams. Must not touch: the metrics (`measure.rs`)
//! or the session's behaviour (it only calls the session's stream API).

use crate::payload::{Checker, Generator};
use crate::scenario::Direction;
use crate::time::Nanos;
use crate::world::{App, Endpoints};
use braid_core::{Event, Session, StreamId};

/// The application model of one transfer on a new stream. Download: the client sends an
/// 8-byte request (the size) and a FIN, the server answers with `size` bytes and a FIN.
/// Upload: the client sends `size` bytes and a FIN. Completion: the receiving application
/// has read the last byte and the FIN.
pub struct Transfer {
    /// Which way the bytes go.
    pub direction: Direction,
    /// Bytes to move.
    pub size: u64,
    /// Seed of the payload.
    pub seed: u64,
    started: bool,
    client_stream: Option<StreamId>,
    server_stream: Option<StreamId>,
    request: Vec<u8>,
    responding: bool,
    gen: Generator,
    staging: Vec<u8>,
    staged: (usize, usize),
    /// Receiver-side hash.
    pub checker: Checker,
    /// When the receiving application had everything.
    pub completed: Option<Nanos>,
    /// An application-level failure.
    pub failure: Option<String>,
}

impl Transfer {
    /// A transfer not yet started.
    pub fn new(direction: Direction, size: u64, seed: u64) -> Self {
        Transfer {
            direction,
            size,
            seed,
            started: false,
            client_stream: None,
            server_stream: None,
            request: Vec::new(),
            responding: false,
            gen: Generator::new(seed, size),
            staging: vec![0u8; 64 * 1024],
            staged: (0, 0),
            checker: Checker::new(),
            completed: None,
            failure: None,
        }
    }

    /// Write as much payload as the session accepts; finish when all is written.
    fn push(&mut self, s: &mut Session, id: StreamId) {
        loop {
            if self.staged.0 == self.staged.1 {
                let n = self.gen.fill(&mut self.staging);
                if n == 0 {
                    let _ = s.stream_finish(id);
                    return;
                }
                self.staged = (0, n);
            }
            match s.stream_write(id, &self.staging[self.staged.0..self.staged.1]) {
                Ok(0) | Err(_) => return,
                Ok(n) => self.staged.0 += n,
            }
        }
    }

    /// Read everything available; true at the end of the stream.
    fn pull(&mut self, s: &mut Session, id: StreamId) -> bool {
        loop {
            match s.stream_read(id, usize::MAX) {
                Ok(Some(b)) if b.is_empty() => return true,
                Ok(Some(b)) => self.checker.update(&b),
                Ok(None) => return false,
                Err(e) => {
                    self.failure = Some(e.to_string());
                    return false;
                }
            }
        }
    }
}

impl App for Transfer {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        if self.completed.is_some() {
            return true;
        }
        if !self.started {
            self.started = true;
            match w.client.open_stream() {
                Ok(id) => {
                    self.client_stream = Some(id);
                    if self.direction == Direction::Down {
                        let _ = w.client.stream_write(id, &self.size.to_le_bytes());
                        let _ = w.client.stream_finish(id);
                    }
                }
                Err(e) => {
                    self.failure = Some(e.to_string());
                    return true;
                }
            }
        }
        while let Some(ev) = w.server.poll_event() {
            if let Event::StreamOpened(id) = ev {
                self.server_stream.get_or_insert(id);
            }
        }
        while w.client.poll_event().is_some() {}
        let (Some(cid), sid) = (self.client_stream, self.server_stream) else {
            return false;
        };
        match self.direction {
            Direction::Down => {
                if let Some(sid) = sid {
                    if !self.responding {
                        while let Ok(Some(b)) = w.server.stream_read(sid, 8) {
                            if b.is_empty() {
                                self.responding = self.request.len() == 8;
                                break;
                            }
                            self.request.extend_from_slice(&b);
                        }
                    }
                    if self.responding {
                        self.push(w.server, sid);
                    }
                }
                if self.pull(w.client, cid) {
                    self.completed = Some(now);
                }
            }
            Direction::Up => {
                self.push(w.client, cid);
                if let Some(sid) = sid {
                    if self.pull(w.server, sid) {
                        self.completed = Some(now);
                    }
                }
            }
        }
        self.completed.is_some() || self.failure.is_some()
    }
}

/// The measured transfer, with a bulk transfer the other way beside it when the workload
/// asks for one (`reverse`): it runs until the measured one ends. The server's stream
/// events are handed to whichever transfer opened the stream.
pub(super) struct Beside<'a> {
    pub(super) main: &'a mut Transfer,
    pub(super) other: Option<Transfer>,
}

impl App for Beside<'_> {
    fn on_wake(&mut self, now: Nanos, w: &mut Endpoints<'_>) -> bool {
        let Some(other) = &mut self.other else {
            return self.main.on_wake(now, w);
        };
        while let Some(ev) = w.server.poll_event() {
            if let Event::StreamOpened(id) = ev {
                for t in [&mut *self.main, &mut *other] {
                    if t.client_stream == Some(id) {
                        t.server_stream = Some(id);
                    }
                }
            }
        }
        if other.on_wake(now, w) && other.failure.is_some() {
            self.main.failure = other
                .failure
                .take()
                .map(|f| format!("the reverse transfer: {f}"));
        }
        self.main.on_wake(now, w)
    }
}
