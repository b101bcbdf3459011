//! The traffic server: a listening thread in the server namespace that hands each
//! connection to a thread of its own and serves the request (send, or receive and answer).
//!
//! Owns: `TrafficServer`, its threads and the server side of the protocol. Must not touch:
//! the client side (`client.rs`) or socket options beyond calling `socket.rs`.

use super::socket::{bind_fd, set_congestion, set_int, stream_socket};
use super::{read_full, receive_all, retryable, send_all, write_full, Abort, Proto, Request};
use super::{POLL, REQUEST_LEN};
use crate::error::{Result, TestbedError};
use braid_sim::Direction;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running traffic server; dropping it stops accepting and ends its connections.
pub struct TrafficServer {
    /// Where it listens (in its namespace).
    pub addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TrafficServer {
    /// Listens on `bind` (port 0: any) inside namespace `ns`.
    pub fn start(ns: &str, bind: SocketAddrV4, proto: Proto) -> Result<TrafficServer> {
        let listener = listen(ns, bind, proto, "the traffic server")?;
        let addr = match listener.local_addr() {
            Ok(std::net::SocketAddr::V4(a)) => a,
            Ok(other) => {
                return Err(TestbedError::Other(format!(
                    "the traffic server got a non-IPv4 address {other}"
                )))
            }
            Err(e) => return Err(TestbedError::io("reading the traffic server's address", e)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("traffic-server".into())
            .spawn(move || accept_loop(listener, st))
            .map_err(|e| TestbedError::io("spawning the traffic server thread", e))?;
        Ok(TrafficServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

/// A non-blocking listening TCP or MPTCP socket on `bind` (port 0: any) in namespace `ns`;
/// `what` names it in errors.
pub(crate) fn listen(
    ns: &str,
    bind: SocketAddrV4,
    proto: Proto,
    what: &str,
) -> Result<TcpListener> {
    let (ns_owned, what_owned) = (ns.to_string(), what.to_string());
    let listener = crate::netns::in_netns(ns, move || -> Result<TcpListener> {
        let fd = stream_socket(proto)?;
        set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
        bind_fd(&fd, bind).map_err(|e| {
            TestbedError::io(format!("binding {what_owned} to {bind} in {ns_owned}"), e)
        })?;
        // SAFETY: fd is a valid socket.
        if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
            return Err(TestbedError::io(
                format!("listening on {bind} in {ns_owned}"),
                io::Error::last_os_error(),
            ));
        }
        Ok(TcpListener::from(fd))
    })??;
    listener
        .set_nonblocking(true)
        .map_err(|e| TestbedError::io(format!("making {what} non-blocking"), e))?;
    Ok(listener)
}

impl Drop for TrafficServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                let st = stop.clone();
                if let Ok(h) = std::thread::Builder::new()
                    .name("traffic-conn".into())
                    .spawn(move || {
                        let _ = serve(s, &st);
                    })
                {
                    conns.push(h);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
        conns.retain(|h| !h.is_finished());
    }
    for h in conns {
        let _ = h.join();
    }
}

fn serve(mut s: TcpStream, stop: &AtomicBool) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(POLL))?;
    s.set_write_timeout(Some(POLL))?;
    let _ = s.set_nodelay(true);
    let ab = Abort {
        stop: Some(stop),
        deadline: Instant::now() + Duration::from_secs(24 * 3600),
    };
    let mut req = [0u8; REQUEST_LEN];
    read_full(&mut s, &mut req, &ab)?;
    let Some(req) = Request::decode(&req) else {
        return Err(io::Error::other("bad request"));
    };
    if !req.cc.is_empty() {
        set_congestion(&s, &req.cc)?;
    }
    match req.direction {
        Direction::Down => {
            send_all(&mut s, req.seed, req.size, &ab)?;
            s.shutdown(Shutdown::Write)?;
            // Wait for the client to close so the last bytes are not cut by a reset.
            let mut b = [0u8; 64];
            loop {
                match s.read(&mut b) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if retryable(&e) => ab.check()?,
                    Err(_) => break,
                }
            }
        }
        Direction::Up => {
            let (ck, samples) = receive_all(&mut s, Instant::now(), req.size, &ab)?;
            let mut reply = Vec::with_capacity(28 + samples.len() * 8);
            reply.extend_from_slice(&ck.received().to_le_bytes());
            reply.extend_from_slice(&ck.digest().to_le_bytes());
            reply.extend_from_slice(&(samples.len() as u32).to_le_bytes());
            for x in &samples {
                reply.extend_from_slice(&x.to_le_bytes());
            }
            write_full(&mut s, &reply, &ab)?;
            s.shutdown(Shutdown::Write)?;
        }
    }
    Ok(())
}
