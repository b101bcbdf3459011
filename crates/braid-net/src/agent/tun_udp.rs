//! TUN mode's UDP flows: each application UDP socket becomes one datagram flow of the
//! session (a DNS query's flow also by the resolver it asked, whose address its answer
//! must come back from; a destination `--bypass`/`--pin` names, a flow per destination),
//! or a direct flow on a path of its own (`tun_direct`) while no session is up or a rule
//! names the destination. Idle flows are forgotten.
//!
//! Owns: the flow table and what a datagram becomes either way. Must not touch: the
//! device, the stack's polling and TCP (`tun`), the direct flows' sockets (`tun_direct`).

use super::super::tun_direct::{Back, DirectFlow};
use super::{Shared, DNS_PORT, FLOW_IDLE, MAX_FLOWS};
use crate::bridge::Cmd;
use crate::rules::Route;
use braid_proxy::{datagram, TargetAddr};
use braid_tun::stack::TunStack;
use bytes::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::debug;

/// A flow's key: the application's socket, and the destination for DNS and ruled flows.
type Key = (SocketAddr, Option<SocketAddr>);

struct Flow {
    id: u32,
    last: Instant,
    /// Direct mode: the flow's own path socket (it started while no session was up).
    direct: Option<DirectFlow>,
}

/// The flow table.
pub(super) struct Flows {
    by_key: HashMap<Key, Flow>,
    keys: HashMap<u32, Key>,
    /// Where the session delivers the flows' datagrams.
    from_session: mpsc::Sender<Bytes>,
    /// Where direct flows deliver their answers.
    from_direct: mpsc::Sender<Back>,
}

impl Flows {
    pub(super) fn new(from_session: mpsc::Sender<Bytes>, from_direct: mpsc::Sender<Back>) -> Self {
        Flows {
            by_key: HashMap::new(),
            keys: HashMap::new(),
            from_session,
            from_direct,
        }
    }

    /// A datagram of the session (flow header, sender, payload) to its application.
    pub(super) fn session_datagram(&mut self, shared: &Shared, stack: &mut TunStack, d: &[u8]) {
        let Ok(p) = datagram::parse(d) else { return };
        let (Some(&key), TargetAddr::Ip(from)) =
            (self.keys.get(&p.flow_id), p.addr.to_target_addr())
        else {
            return;
        };
        if let Some(f) = self.by_key.get_mut(&key) {
            f.last = Instant::now();
        }
        let (app, asked) = key;
        // A DNS answer from the server's resolver, as from the resolver asked.
        let from = asked.unwrap_or(from);
        if asked.is_some() {
            shared.learn(p.payload);
        }
        if let Err(e) = stack.send_udp(from, app, p.payload) {
            debug!("a datagram for {app} dropped: {e}");
        }
    }

    /// A direct flow's answer to its application: as from its sender (for DNS, the
    /// resolver asked).
    pub(super) fn direct_answer(&mut self, shared: &Shared, stack: &mut TunStack, back: Back) {
        let (app, from, payload) = back;
        if from.port() == DNS_PORT {
            shared.learn(&payload);
        }
        for key in [(app, Some(from)), (app, None)] {
            if let Some(f) = self.by_key.get_mut(&key) {
                f.last = Instant::now();
                break;
            }
        }
        if let Err(e) = stack.send_udp(from, app, &payload) {
            debug!("a datagram for {app} dropped: {e}");
        }
    }

    /// Forget the flows idle for [`FLOW_IDLE`].
    pub(super) fn sweep(&mut self, shared: &Shared) {
        let keys = &mut self.keys;
        self.by_key.retain(|_, f| {
            let keep = f.last.elapsed() < FLOW_IDLE;
            if !keep {
                keys.remove(&f.id);
                if let Ok(mut m) = shared.flows.lock() {
                    m.remove(&f.id);
                }
            }
            keep
        });
    }

    /// An application's datagram from `src` to `dst`: on its flow's direct path, or as a
    /// datagram of the session (DNS to the server's resolver, whichever resolver was
    /// asked: a local one too, the routing sends every query here).
    pub(super) fn app_datagram(
        &mut self,
        shared: &Shared,
        src: SocketAddr,
        dst: SocketAddr,
        payload: Vec<u8>,
    ) {
        let dns = dst.port() == DNS_PORT;
        // A destination a rule names gets a direct flow of its own per application socket
        // (`--bypass`, `--pin`).
        let route = shared.route_ip(dst.ip());
        let ruled = route != Route::Default && shared.direct.is_some();
        let key = (src, (dns || ruled).then_some(dst));
        let back = self.from_direct.clone();
        let Some(flow) = self.flow(shared, key) else {
            debug!(%src, "TUN: too many UDP flows; a datagram dropped");
            return;
        };
        let session = shared.session.borrow().clone();
        let id = flow.id;
        let start = |d| DirectFlow::start(d, &shared.board, src, id, back.clone(), &route);
        if let (true, None, Some(d)) = (ruled, &flow.direct, &shared.direct) {
            flow.direct = start(d);
            if flow.direct.is_none() {
                return;
            }
        }
        // While the agent starts, a flow waits for the session (its datagrams are dropped,
        // as with direct mode off) rather than stay direct; a DNS query's flow, answered
        // once, need not wait.
        let direct_now = dns || shared.direct_now();
        if let (None, None, Some(d), true) = (&session, &flow.direct, shared.fallback(), direct_now)
        {
            // No session: this flow goes on a path of its own (a flow that began in the
            // session moves here when the session is gone).
            flow.direct = start(d);
        }
        if let Some(df) = &flow.direct {
            df.send(dst, payload);
            return;
        }
        let target = if dns {
            TargetAddr::Domain(datagram::SERVER_RESOLVER.into(), DNS_PORT)
        } else {
            TargetAddr::Ip(dst)
        };
        let mut out = Vec::with_capacity(payload.len() + 32);
        if datagram::emit(flow.id, &target, &payload, &mut out).is_ok() {
            if let Some(cmd) = session {
                // One session flow per application socket and destination.
                let flow = datagram::session_flow(&out);
                let _ = cmd.send(Cmd::Datagram(flow, Bytes::from(out)));
            }
        }
    }

    /// The flow of `key`, made when new (`None` when [`MAX_FLOWS`] are open).
    fn flow(&mut self, shared: &Shared, key: Key) -> Option<&mut Flow> {
        let full = self.by_key.len() >= MAX_FLOWS;
        if !self.by_key.contains_key(&key) {
            if full {
                return None;
            }
            let id = shared.next_flow.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut m) = shared.flows.lock() {
                m.insert(id, self.from_session.clone());
            }
            self.keys.insert(id, key);
            self.by_key.insert(
                key,
                Flow {
                    id,
                    last: Instant::now(),
                    direct: None,
                },
            );
            return self.by_key.get_mut(&key);
        }
        let f = self.by_key.get_mut(&key)?;
        f.last = Instant::now();
        Some(f)
    }
}
