//! One handshake of the agent, sans-IO: message 1 on every (path, server) pair for one
//! session id, rounds 0.5 s, 1 s, 2 s, then 4 s apart; from the second round on, message 1
//! also over TCP (networks that block UDP); a cookie reply answered at once with message 1
//! again, with mac2 (over TCP down the connection the reply came on); the first valid
//! answer wins (the server with the lowest RTT); then a little more listening for the other
//! paths' answers ([`affinity`]); the refusals (session limit, no common cipher, key not
//! accepted) and the errors told to the user: a server whose port took a TCP connection
//! but that answered nothing is not a network that blocks UDP but, most likely, one whose
//! key is not this agent's `server_pub` (a server drops a message 1 made for another key
//! without a word; issue 38 item 4).
//!
//! Owns: those decisions and the per-pair Noise state. Must not touch: sockets, TCP
//! connections, tokio, clocks (the caller passes `now` and `now_ms`, and the session id),
//! the session that follows (`run`). The caller sends what [`Handshake::poll_transmit`]
//! says, feeds answers to [`Handshake::handle_answer`], calls
//! [`Handshake::handle_timeout`] at [`Handshake::poll_timeout`], and reads
//! [`Handshake::outcome`].

use crate::agent::affinity;
use braid_crypto::{
    parse_header, read_cipher_refusal, Cipher, ClientHandshake, PacketType, PublicKey, SessionKeys,
    StaticKeypair,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// The first round's wait; each later round waits twice the one before, up to 8 times this.
pub(crate) const ROUND_FIRST: Duration = Duration::from_millis(500);

/// The wait of round `n` (from 0): 0.5 s, 1 s, 2 s, then 4 s.
pub(crate) fn round_wait(n: u32) -> Duration {
    ROUND_FIRST * (1 << n.min(3))
}

/// A path of the handshake (index = its place in the caller's list).
#[derive(Debug, Clone)]
pub(crate) struct HsPath {
    /// The configured path's name (for the log and errors).
    pub name: String,
    /// The path's id in the session (its configured slot).
    pub id: u8,
    /// Sent through a relay: never over TCP, and a relay leads to one server.
    pub relayed: bool,
}

/// One (path, server) pair to shake hands on: path index, server address, and where the
/// path sends to reach it (the server, or the path's relay).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pair {
    pub path: usize,
    pub server: SocketAddr,
    pub peer: SocketAddr,
}

/// What the handshake is set up with.
pub(crate) struct Setup {
    pub key: Arc<StaticKeypair>,
    pub server_pub: PublicKey,
    pub ciphers: braid_crypto::Ciphers,
    /// Unguessable, from the caller's CSPRNG.
    pub sid: u64,
    /// The caller's clock, unix ms (in message 1).
    pub now_ms: u64,
    pub paths: Vec<HsPath>,
    pub pairs: Vec<Pair>,
    /// The configured servers (for the error when none answers).
    pub servers: Vec<SocketAddr>,
    /// How many rounds before giving up.
    pub rounds: u32,
}

/// How a packet goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// The path's UDP socket.
    Udp,
    /// A new TCP connection from the path to the server's port; its first packet back is
    /// an answer over that connection.
    TcpConnect,
    /// Down the TCP connection the caller numbered so (a cookie reply came on it).
    Tcp(u64),
}

/// A packet to send: on path `path` to `to`, by `via`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transmit {
    pub path: usize,
    pub to: SocketAddr,
    pub via: Via,
    pub packet: Vec<u8>,
}

/// A handshake won: on path `path`, the server the session goes to, its keys, and the TCP
/// connection (the caller's number) the answer came on.
pub(crate) struct Won {
    pub path: usize,
    pub server: SocketAddr,
    pub keys: SessionKeys,
    pub tcp: Option<u64>,
}

struct Attempt {
    pair: Pair,
    hs: ClientHandshake,
    msg1: Vec<u8>,
}

/// One handshake's state (see the module doc).
pub(crate) struct Handshake {
    setup: Setup,
    attempts: Vec<Attempt>,
    /// The round under way (from 0) and when its packets went out.
    round: u32,
    sent: Instant,
    deadline: Option<Instant>,
    out: VecDeque<Transmit>,
    won: Option<Won>,
    /// The first valid answer and the valid answers after it (see `affinity`).
    winner: Option<affinity::Answer>,
    later: Vec<affinity::Answer>,
    /// Servers at their session limit, or accepting none of the ciphers offered.
    full: Vec<SocketAddr>,
    no_cipher: Vec<(SocketAddr, Vec<Cipher>)>,
    /// Servers that said this agent's key is not authorized there.
    key_refused: Vec<SocketAddr>,
    /// Servers whose port took a TCP connection of this handshake.
    reached_tcp: Vec<SocketAddr>,
    servers: usize,
    done: Option<Result<Won, String>>,
}

impl Handshake {
    /// A handshake per pair; round 0 goes out at `now`.
    pub(crate) fn new(setup: Setup, now: Instant) -> Result<Handshake, String> {
        let mut attempts = Vec::new();
        for &pair in &setup.pairs {
            let (hs, msg1) = ClientHandshake::offering(
                &setup.key,
                &setup.server_pub,
                setup.sid,
                setup.paths[pair.path].id,
                setup.now_ms,
                &setup.ciphers,
            )
            .map_err(|e| format!("handshake: {e}"))?;
            attempts.push(Attempt { pair, hs, msg1 });
        }
        let servers = {
            let mut v: Vec<SocketAddr> = attempts.iter().map(|a| a.pair.server).collect();
            v.sort();
            v.dedup();
            v.len()
        };
        let mut h = Handshake {
            setup,
            attempts,
            round: 0,
            sent: now,
            deadline: None,
            out: VecDeque::new(),
            won: None,
            winner: None,
            later: Vec::new(),
            full: Vec::new(),
            no_cipher: Vec::new(),
            key_refused: Vec::new(),
            reached_tcp: Vec::new(),
            servers,
            done: None,
        };
        h.send_round(now);
        Ok(h)
    }

    /// The next packet to send.
    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// When [`Handshake::handle_timeout`] is due (`None` once decided).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.filter(|_| self.done.is_none())
    }

    /// The result, once decided (taken once).
    pub(crate) fn outcome(&mut self) -> Option<Result<Won, String>> {
        self.done.take()
    }

    /// Is the result decided (and not taken yet)?
    #[cfg(test)]
    pub(crate) fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// Message 1 on every pair (round `self.round`); from round 1 on, over TCP too, and in
    /// round 1 a TCP connection per pair that is not relayed.
    fn send_round(&mut self, now: Instant) {
        if self.round == 1 {
            // No answer over UDP within 0.5 s: the network may block UDP. Message 1 over
            // TCP too, from each path to each server's port (not through a relay).
            for a in &self.attempts {
                if !self.setup.paths[a.pair.path].relayed {
                    self.out.push_back(Transmit {
                        path: a.pair.path,
                        to: a.pair.server,
                        via: Via::TcpConnect,
                        packet: a.msg1.clone(),
                    });
                }
            }
        }
        for a in &self.attempts {
            self.out.push_back(Transmit {
                path: a.pair.path,
                to: a.pair.peer,
                via: Via::Udp,
                packet: a.msg1.clone(),
            });
        }
        self.sent = now;
        self.deadline = Some(now + round_wait(self.round));
    }

    /// The round's (or the grace's) time is up: decide, or send the next round.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if self.done.is_some() || self.deadline.is_none_or(|d| now < d) {
            return;
        }
        if self.won.is_some() || self.round + 1 >= self.setup.rounds {
            self.finish();
            return;
        }
        self.round += 1;
        self.send_round(now);
    }
}

impl Handshake {
    /// A packet that came on path `path` from `from` (over the TCP connection the caller
    /// numbers `tcp`, if it came over TCP).
    pub(crate) fn handle_answer(
        &mut self,
        now: Instant,
        path: usize,
        from: SocketAddr,
        pkt: &[u8],
        tcp: Option<u64>,
    ) {
        if self.done.is_some() {
            return;
        }
        let ptype = match parse_header(pkt) {
            Ok(h) if h.session_id == self.setup.sid => h.ptype,
            _ => return,
        };
        let Some(k) = self
            .attempts
            .iter()
            .position(|a| a.pair.path == path && a.pair.peer == from)
        else {
            return;
        };
        match ptype {
            PacketType::SessionLimit | PacketType::CipherRefused | PacketType::KeyRefused => {
                self.refused(k, ptype, pkt)
            }
            PacketType::Cookie => self.cookie(k, from, pkt, tcp),
            PacketType::Handshake if self.won.is_some() => self.later_answer(k, pkt),
            PacketType::Handshake => self.first_answer(now, k, pkt, tcp),
            _ => {}
        }
    }

    /// A refusal (unauthenticated: only reported); all servers refusing ends the handshake.
    fn refused(&mut self, k: usize, ptype: PacketType, pkt: &[u8]) {
        let server = self.attempts[k].pair.server;
        match ptype {
            PacketType::SessionLimit if !self.full.contains(&server) => self.full.push(server),
            PacketType::CipherRefused if self.no_cipher.iter().all(|x| x.0 != server) => {
                if let Some((_, accepted)) = read_cipher_refusal(pkt) {
                    warn!(%server, accepted = %names(&accepted), offered = %names(self.setup.ciphers.as_slice()),
                        "the server accepts none of the packet ciphers this agent offers");
                    self.no_cipher.push((server, accepted));
                }
            }
            PacketType::KeyRefused if !self.key_refused.contains(&server) => {
                warn!(%server, key = %self.setup.key.public().to_base64(),
                    "the server does not accept this agent's key: it is not in the server's agents file");
                self.key_refused.push(server);
            }
            _ => {}
        }
        if self.full.len() + self.no_cipher.len() + self.key_refused.len() >= self.servers {
            self.finish();
        }
    }

    /// A TCP connection of this handshake to `server` was accepted: the server's port is
    /// reachable, so silence from it is not a network that blocks UDP.
    pub(crate) fn handle_tcp_connected(&mut self, server: SocketAddr) {
        if !self.reached_tcp.contains(&server) {
            self.reached_tcp.push(server);
        }
    }

    /// The server is under load and wants proof that we receive at our address: message 1
    /// again, now with mac2 from its cookie, at once (and in every later round). A forged
    /// reply fails to open and changes nothing.
    fn cookie(&mut self, k: usize, from: SocketAddr, pkt: &[u8], tcp: Option<u64>) {
        let a = &mut self.attempts[k];
        if let Err(e) = a.hs.handle_cookie_reply(pkt) {
            debug!("ignored a bad cookie reply: {e}");
            return;
        }
        a.msg1 = a.hs.message1();
        let name = &self.setup.paths[a.pair.path].name;
        debug!(path = %name, peer = %a.pair.peer, tcp = tcp.is_some(), "cookie reply: message 1 again with mac2");
        // It came over TCP: the retry goes down the same connection (the cookie is bound
        // to the connection's address).
        let (to, via) = match tcp {
            Some(c) => (from, Via::Tcp(c)),
            None => (a.pair.peer, Via::Udp),
        };
        self.out.push_back(Transmit {
            path: a.pair.path,
            to,
            via,
            packet: a.msg1.clone(),
        });
    }

    /// A valid answer after the first: another server behind the address?
    fn later_answer(&mut self, k: usize, pkt: &[u8]) {
        let a = &mut self.attempts[k];
        if a.hs.finish(pkt).is_ok() {
            self.later.push(affinity::Answer {
                path: a.pair.path,
                asked: a.pair.server,
                own: a.hs.server_address(),
            });
        }
    }
}

impl Handshake {
    /// The first valid answer wins: its server carries the session (the one it names as
    /// its own, if any, of the same family), its path is the session's first.
    fn first_answer(&mut self, now: Instant, k: usize, pkt: &[u8], tcp: Option<u64>) {
        let a = &mut self.attempts[k];
        let keys = match a.hs.finish(pkt) {
            Ok(keys) => keys,
            Err(e) => {
                debug!("ignored a bad handshake reply: {e}");
                return;
            }
        };
        info!(cipher = %keys.cipher(), "packet cipher chosen by the server");
        let (asked, own, path) = (a.pair.server, a.hs.server_address(), a.pair.path);
        // A server behind a shared address (anycast, a load balancer) names its own: every
        // path of the session goes there.
        let server = match own {
            Some(own) if own.is_ipv4() == asked.is_ipv4() => {
                if own != asked {
                    info!(%asked, server = %own, "the server named its own address: the session goes there");
                }
                own
            }
            Some(own) => {
                debug!(%own, "ignored a server address of the other family");
                asked
            }
            None => asked,
        };
        if tcp.is_some() {
            warn!(path = %self.setup.paths[path].name, server = %asked,
                "the handshake was answered over TCP only: the network blocks UDP; the path carries braid over TCP");
        }
        let first = affinity::Answer { path, asked, own };
        // Other paths that asked this address directly could be answered by another server
        // behind it: listen a little longer for them.
        let paths = &self.setup.paths;
        let others = self
            .attempts
            .iter()
            .filter(|x| {
                x.pair.path != path && x.pair.server == asked && !paths[x.pair.path].relayed
            })
            .count();
        self.won = Some(Won {
            path,
            server,
            keys,
            tcp,
        });
        self.winner = Some(first);
        match affinity::grace(&first, others, now.saturating_duration_since(self.sent)) {
            Some(g) => self.deadline = self.deadline.map(|d| d.min(now + g)),
            None => self.finish(),
        }
    }

    /// Decide: the winner (unless a balancer split the paths), or why there is none.
    fn finish(&mut self) {
        let names = |i: usize| self.setup.paths[i].name.as_str();
        let result = match self.won.take() {
            Some(won) => match self.winner.map(|w| (w, affinity::split(&w, &self.later))) {
                Some((w, split)) if !split.is_empty() => {
                    let others: Vec<&str> = split.iter().map(|i| names(*i)).collect();
                    Err(affinity::split_error(w.asked, names(w.path), &others))
                }
                _ => Ok(won),
            },
            None => Err(self.no_answer()),
        };
        self.done = Some(result);
        self.deadline = None;
    }

    /// Why no server took the session.
    fn no_answer(&self) -> String {
        let offered = names(self.setup.ciphers.as_slice());
        if !self.no_cipher.is_empty() {
            let said: Vec<String> = (self.no_cipher.iter())
                .map(|(s, list)| format!("{s} accepts only [{}]", names(list)))
                .collect();
            return format!(
                "no common packet cipher: {}, and this agent offers [{offered}]. Give agent and \
                 server the same --cipher, or auto on both",
                said.join("; "),
            );
        }
        if !self.key_refused.is_empty() {
            let key = self.setup.key.public().to_base64();
            return format!(
                "the server(s) {:?} do not accept this agent's key {key}: it is not in their \
                 authorized file. On the server add the line `{key}` to its agents file \
                 (/etc/braid/agents.txt in the package; it is re-read within a second), or \
                 give this agent the key pair whose public key is there",
                self.key_refused
            );
        }
        if !self.full.is_empty() {
            return format!(
                "the server(s) {:?} refused the session: at their session limit (`braid server \
                 --max-sessions`); existing sessions go on there. Ask its operator to raise the \
                 limit, or wait",
                self.full
            );
        }
        let paths: Vec<&str> = self.setup.paths.iter().map(|p| p.name.as_str()).collect();
        if !self.reached_tcp.is_empty() {
            return format!(
                "the server(s) {:?} took a TCP connection on their port but answered no \
                 handshake, over UDP or TCP, on the paths {paths:?}: the network is not the \
                 problem. Most likely this agent's server_pub (--server-pub) is not that \
                 server's public key (a server drops a handshake made for another key without \
                 a word): copy the line of the server's /etc/braid/server.pub into server_pub. \
                 (A server older than this agent also drops, without a word, a handshake \
                 from a key not in its agents file.)",
                self.reached_tcp
            );
        }
        format!(
            "no handshake answer from {:?} on any of the paths {paths:?}: check the address, that \
             `braid server` runs there, that its key matches --server-pub and that this agent's \
             key is in its authorized file",
            self.setup.servers
        )
    }
}

/// Cipher names for a message: `aes-256-gcm, chacha20-poly1305`.
pub(crate) fn names(list: &[Cipher]) -> String {
    list.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
