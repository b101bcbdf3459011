//! Streams between the session task and the tasks that own application sockets.
//!
//! Owns: the handle an application-side task uses to read and write one session stream,
//! the session-side state that moves bytes between a stream and that handle, and the
//! backpressure in both directions. Must not touch: sockets or the session itself (the
//! session task calls [`StreamBridge`] methods with the session in hand).
//!
//! Backpressure: app -> session, the writer takes permits (one per byte) from a semaphore
//! before it sends a chunk; the session task gives them back once the stream accepted the
//! bytes. Session -> app, chunks go through a bounded channel; when it is full the session
//! stops reading the stream (so stream flow control pushes back on the peer) and sets a
//! flag that makes the reader ask for more once it has drained a chunk.
//!
//! A session may also bound what all its streams' writers hold together ([`SessionCredit`],
//! the server's `max_buffered`): a writer then takes permits from that too, so an agent that
//! opens many streams and never reads pauses the server's reads from their destinations
//! once the session holds that much, however many streams it opened.

use braid_core::{Session, StreamId};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};

/// Bytes an application task may hand over before the stream accepted them.
pub const WRITE_CREDIT: usize = 1 << 20;
/// Chunks buffered towards the application task.
const READ_CHUNKS: usize = 32;
/// Largest chunk read from a stream at once.
const READ_CHUNK: usize = 64 * 1024;

/// Bytes all of a session's writers together may hand over before their streams accepted
/// them (shared by the session's streams; none: only each stream's [`WRITE_CREDIT`]).
#[derive(Debug, Clone)]
pub struct SessionCredit(Arc<Semaphore>);

impl SessionCredit {
    /// At most `bytes` (at least one stream's [`WRITE_CREDIT`]) held at once.
    pub fn new(bytes: u64) -> SessionCredit {
        let n = (bytes as usize).clamp(WRITE_CREDIT, Semaphore::MAX_PERMITS);
        SessionCredit(Arc::new(Semaphore::new(n)))
    }

    /// `n` bytes handed over left the session (their stream was gone).
    pub fn give_back(&self, n: usize) {
        self.0.add_permits(n);
    }

    /// Bytes the session's writers may still hand over now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// What the session task tells a stream's reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamMsg {
    /// Bytes, in order.
    Data(Bytes),
    /// The peer finished its sending side.
    Fin,
    /// The peer reset its sending side with this code, or the session ended.
    Reset(u64),
}

/// Requests from application-side tasks to the session task.
#[derive(Debug)]
pub enum Cmd {
    /// Bytes to write (permits for `len` bytes were taken from the stream's credit).
    Write(StreamId, Bytes),
    /// The application finished writing.
    Finish(StreamId),
    /// Abort the stream in both directions.
    Reset(StreamId, u64),
    /// The reader drained a chunk after the session had to stop reading.
    Wake(StreamId),
    /// Send an unreliable datagram of a flow (`Session::send_flow_datagram`; proxied UDP
    /// uses `braid_proxy::datagram::session_flow`).
    Datagram(u64, Bytes),
    /// Open a new stream (client side).
    Open(tokio::sync::oneshot::Sender<Result<StreamHandle, braid_core::StreamError>>),
    /// Close the session.
    Close,
    /// Run this on the session (path changes by the agent's path manager).
    Session(SessionFn),
}

/// A change the owner of a session task makes to the session itself (add or remove a path,
/// set a path's state), run by the task with its `now`.
pub struct SessionFn(pub Box<SessionChange>);

/// The body of a [`SessionFn`].
pub type SessionChange = dyn FnOnce(&mut Session, braid_core::Instant) + Send;

impl std::fmt::Debug for SessionFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionFn")
    }
}

/// The application side of one stream: a reader and a writer that can be used from two
/// tasks (or two halves of a `join!`).
#[derive(Debug)]
pub struct StreamHandle {
    /// The stream.
    pub id: StreamId,
    /// Bytes from the peer.
    pub reader: StreamReader,
    /// Bytes to the peer.
    pub writer: StreamWriter,
}

/// Reads one stream.
#[derive(Debug)]
pub struct StreamReader {
    id: StreamId,
    rx: mpsc::Receiver<StreamMsg>,
    cmd: mpsc::UnboundedSender<Cmd>,
    read_blocked: Arc<AtomicBool>,
}

/// Writes one stream.
#[derive(Debug, Clone)]
pub struct StreamWriter {
    id: StreamId,
    cmd: mpsc::UnboundedSender<Cmd>,
    credit: Arc<Semaphore>,
    session: Option<SessionCredit>,
}

/// The session task has ended.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the session is closed")]
pub struct SessionGone;

impl StreamReader {
    /// The next message from the peer; `None` once the session is gone.
    pub async fn read(&mut self) -> Option<StreamMsg> {
        let m = self.rx.recv().await;
        if self.read_blocked.swap(false, Ordering::AcqRel) {
            let _ = self.cmd.send(Cmd::Wake(self.id));
        }
        m
    }
}

impl StreamWriter {
    /// Send bytes to the peer; waits while the stream has too much unaccepted data.
    pub async fn write(&self, mut data: Bytes) -> Result<(), SessionGone> {
        while !data.is_empty() {
            let chunk = data.split_to(data.len().min(WRITE_CREDIT));
            let permit = self
                .credit
                .acquire_many(chunk.len() as u32)
                .await
                .map_err(|_| SessionGone)?;
            permit.forget();
            if let Some(sc) = &self.session {
                match sc.0.acquire_many(chunk.len() as u32).await {
                    Ok(p) => p.forget(),
                    Err(_) => return Err(SessionGone),
                }
            }
            self.cmd
                .send(Cmd::Write(self.id, chunk))
                .map_err(|_| SessionGone)?;
        }
        Ok(())
    }

    /// True when a write of `n` bytes would wait now (the stream has too much unaccepted
    /// data: the session sends slower than its writer writes).
    pub fn would_wait(&self, n: usize) -> bool {
        self.credit.available_permits() < n.min(WRITE_CREDIT)
    }

    /// No more data from this side.
    pub fn finish(&self) {
        let _ = self.cmd.send(Cmd::Finish(self.id));
    }

    /// Abort the stream in both directions.
    pub fn reset(&self, code: u64) {
        let _ = self.cmd.send(Cmd::Reset(self.id, code));
    }
}

/// The session task's side of one stream.
#[derive(Debug)]
pub struct StreamBridge {
    id: StreamId,
    to_app: mpsc::Sender<StreamMsg>,
    credit: Arc<Semaphore>,
    session: Option<SessionCredit>,
    read_blocked: Arc<AtomicBool>,
    pending: VecDeque<Bytes>,
    finish_requested: bool,
    finished: bool,
    read_done: bool,
    /// The end of the stream (FIN or reset), read but not yet delivered.
    end: Option<StreamMsg>,
}

impl Drop for StreamBridge {
    /// The session task is gone (or dropped the stream): a writer waiting for credit gets
    /// [`SessionGone`] instead of waiting forever (the reader sees its channel close).
    fn drop(&mut self) {
        self.credit.close();
        // What the stream never accepted goes back to the session's writers.
        let n: usize = self.pending.iter().map(|c| c.len()).sum();
        self.give_back(n);
    }
}

impl StreamBridge {
    /// A bridge and its application handle for stream `id`.
    pub fn new(id: StreamId, cmd: mpsc::UnboundedSender<Cmd>) -> (StreamBridge, StreamHandle) {
        Self::with_credit(id, cmd, None)
    }

    /// A bridge whose writer also takes the session's shared credit.
    pub fn with_credit(
        id: StreamId,
        cmd: mpsc::UnboundedSender<Cmd>,
        session: Option<SessionCredit>,
    ) -> (StreamBridge, StreamHandle) {
        let (tx, rx) = mpsc::channel(READ_CHUNKS);
        let credit = Arc::new(Semaphore::new(WRITE_CREDIT));
        let read_blocked = Arc::new(AtomicBool::new(false));
        let bridge = StreamBridge {
            id,
            to_app: tx,
            credit: credit.clone(),
            session: session.clone(),
            read_blocked: read_blocked.clone(),
            pending: VecDeque::new(),
            finish_requested: false,
            finished: false,
            read_done: false,
            end: None,
        };
        let handle = StreamHandle {
            id,
            reader: StreamReader {
                id,
                rx,
                cmd: cmd.clone(),
                read_blocked,
            },
            writer: StreamWriter {
                id,
                cmd,
                credit,
                session,
            },
        };
        (bridge, handle)
    }

    /// Queue application bytes and write what the stream accepts.
    pub fn write(&mut self, s: &mut Session, data: Bytes) {
        self.pending.push_back(data);
        self.flush(s);
    }

    /// The application finished writing.
    pub fn finish(&mut self, s: &mut Session) {
        self.finish_requested = true;
        self.flush(s);
    }

    /// Write pending bytes; give their credit back as the stream accepts them.
    pub fn flush(&mut self, s: &mut Session) {
        while let Some(chunk) = self.pending.front_mut() {
            // The chunk itself goes into the stream's buffer: no copy.
            match s.stream_write_bytes(self.id, chunk.clone()) {
                Ok(0) => return,
                Ok(n) => {
                    let whole = n == chunk.len();
                    if !whole {
                        let _ = chunk.split_to(n);
                    }
                    self.give_back(n);
                    if !whole {
                        return;
                    }
                    self.pending.pop_front();
                }
                Err(_) => {
                    // The stream is gone or stopped: drop what is left.
                    let n: usize = self.pending.drain(..).map(|c| c.len()).sum();
                    self.give_back(n);
                    return;
                }
            }
        }
        if self.finish_requested && !self.finished {
            self.finished = true;
            let _ = s.stream_finish(self.id);
        }
    }

    /// `n` bytes left the bridge: their credit goes back to the stream's and the session's
    /// writers.
    fn give_back(&self, n: usize) {
        self.credit.add_permits(n);
        if let Some(sc) = &self.session {
            sc.give_back(n);
        }
    }

    /// Move readable bytes to the application until its channel is full. The stream's
    /// chunks (one per packet) are coalesced into messages of up to `READ_CHUNK` bytes: one
    /// wake-up and one socket write per message, not per packet.
    pub fn pump_read(&mut self, s: &mut Session) {
        while !self.read_done {
            // Set the flag first: if the channel turns out full, the reader is certain to
            // see it after draining a chunk.
            self.read_blocked.store(true, Ordering::Release);
            let permit = match self.to_app.try_reserve() {
                Ok(p) => p,
                Err(mpsc::error::TrySendError::Full(())) => return,
                Err(mpsc::error::TrySendError::Closed(())) => {
                    self.read_done = true;
                    let _ = s.stream_stop(self.id, 0);
                    return;
                }
            };
            self.read_blocked.store(false, Ordering::Release);
            if let Some(end) = self.end.take() {
                permit.send(end);
                self.read_done = true;
                return;
            }
            let mut data = bytes::BytesMut::new();
            let mut single: Option<Bytes> = None;
            loop {
                let have = single.as_ref().map_or(0, |b| b.len()) + data.len();
                if have >= READ_CHUNK {
                    break;
                }
                match s.stream_read(self.id, READ_CHUNK - have) {
                    Ok(Some(b)) if b.is_empty() => {
                        self.end = Some(StreamMsg::Fin);
                        break;
                    }
                    Ok(Some(b)) => {
                        if single.is_none() && data.is_empty() {
                            single = Some(b);
                        } else {
                            if let Some(first) = single.take() {
                                data.reserve(READ_CHUNK);
                                data.extend_from_slice(&first);
                            }
                            data.extend_from_slice(&b);
                        }
                    }
                    Ok(None) => break,
                    Err(braid_core::StreamError::Reset { code, .. }) => {
                        self.end = Some(StreamMsg::Reset(code));
                        break;
                    }
                    Err(_) => {
                        self.end = Some(StreamMsg::Reset(0));
                        break;
                    }
                }
            }
            let msg = match single {
                Some(b) => Some(b),
                None if !data.is_empty() => Some(data.freeze()),
                None => None,
            };
            match msg {
                Some(b) => permit.send(StreamMsg::Data(b)),
                None => match self.end.take() {
                    Some(end) => {
                        permit.send(end);
                        self.read_done = true;
                        return;
                    }
                    None => return,
                },
            }
        }
    }

    /// The session ended or reset the stream: tell the application.
    pub fn abort(&mut self, code: u64) {
        if !self.read_done {
            self.read_done = true;
            let _ = self.to_app.try_send(StreamMsg::Reset(code));
        }
        self.credit.close();
    }

    /// Both directions are over: the bridge can be dropped.
    pub fn is_done(&self) -> bool {
        self.read_done && (self.finished || self.credit.is_closed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An agent that opens many streams and never reads: their writers (the server's reads
    /// from the destinations) stop once the session's credit is held, not per stream.
    #[tokio::test]
    async fn many_streams_that_never_drain_hold_at_most_the_sessions_credit() {
        let (cmd, mut cmd_rx) = mpsc::unbounded_channel();
        let credit = SessionCredit::new(2 * WRITE_CREDIT as u64);
        // The bridges stay alive (the session task keeps them); nothing drains them.
        let (_bridges, handles): (Vec<StreamBridge>, Vec<StreamHandle>) = (0..4)
            .map(|id| StreamBridge::with_credit(id, cmd.clone(), Some(credit.clone())))
            .unzip();
        let chunk = Bytes::from(vec![7u8; WRITE_CREDIT]);
        for h in &handles[..2] {
            h.writer.write(chunk.clone()).await.unwrap();
        }
        assert_eq!(credit.available(), 0);
        let third = handles[2].writer.write(chunk.clone());
        tokio::pin!(third);
        let waited = tokio::time::timeout(Duration::from_millis(50), &mut third).await;
        assert!(
            waited.is_err(),
            "a third stream wrote past the session's credit"
        );
        // The session accepts one stream's bytes: the third writer goes on.
        let Some(Cmd::Write(_, data)) = cmd_rx.recv().await else {
            panic!("no write handed over");
        };
        credit.give_back(data.len());
        tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("the third write still waits")
            .unwrap();
    }
}
