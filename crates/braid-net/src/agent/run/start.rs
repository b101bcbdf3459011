//! Starting a session the handshake established: its first paths (added to the session
//! and to the links, the first over TCP if its answer came that way), the session task,
//! the datagram dispatcher and the inbound ports; the front ends get its command channel.
//!
//! Owns: those `Runner` methods and [`Live`], the running session's handles. Must not
//! touch: the session loop (`run.rs`), the decisions (the client's).

use super::*;

/// A running session's handles (dropped when it ends).
pub(super) struct Live {
    pub(super) handle: AbortOnDrop<Option<braid_core::SessionError>>,
    pub(super) links: Links,
    pub(super) cmd_tx: mpsc::UnboundedSender<Cmd>,
    pub(super) ev_rx: mpsc::UnboundedReceiver<Event>,
    pub(super) meta: SessionMeta,
    pub(super) _dispatcher: Task,
    pub(super) _inbound: Option<crate::agent::inbound::Running>,
}

impl Runner {
    /// Start the session the handshake established: its paths, its task, its datagram
    /// dispatcher and inbound ports; the front ends get its command channel.
    pub(super) fn start_session(
        &mut self,
        mut est: Established,
        tx: &watch::Sender<Option<mpsc::UnboundedSender<Cmd>>>,
        shared: &Shared,
    ) -> Live {
        self.server = est.server;
        let meta = SessionMeta {
            id: est.sid,
            server: est.server,
            since: std::time::Instant::now(),
        };
        shared.board.session_started();
        let clock = Clock::new();
        let now = clock.now();
        // Path-challenge tokens from a CSPRNG seed, as the server's (the core's own generator
        // is deterministic from its seed).
        let mut transport = self.cfg.transport.clone();
        transport.seed = braid_crypto::random::random_u64().unwrap_or(transport.seed ^ est.sid);
        let mut session = Session::connect(transport, now, est.sid, est.first);
        let first_tcp = est.first_tcp.take();
        if first_tcp.is_some() {
            session.set_path_reliable(now, est.first, true);
        }
        let (in_tx, in_rx) = mpsc::channel::<Incoming>(4096);
        let mut links = Links::new(in_tx);
        let started = self.first_paths(&mut session, now, &est, first_tcp, &mut links);
        let names: Vec<&str> = started.iter().map(|p| self.name(p.0)).collect();
        info!(
            session = format_args!("{:016x}", est.sid),
            server = %est.server,
            first = %self.name(est.first as usize),
            paths = ?names,
            "session established"
        );
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let (dg_tx, dg_rx) = mpsc::channel::<Bytes>(1024);
        let idle = self.cfg.proxy_limits.idle_timeout;
        let inbound = crate::agent::inbound::start(&self.cfg.forwards, cmd_tx.clone(), idle);
        let inbound_dg = inbound.as_ref().map(|i| i.datagrams.clone());
        let _dispatcher = Self::dispatcher(shared, inbound_dg, dg_rx);
        let task = SessionTask {
            session,
            protection: Aead::client(
                est.keys,
                self.cfg.rekey,
                self.cfg.key.clone(),
                self.cfg.server_pub,
                est.sid,
                est.first,
                self.keys.clone(),
            )
            .offering(self.cfg.ciphers.clone()),
            sender: PathSockets {
                table: links.table.clone(),
            },
            incoming: in_rx,
            cmd_rx,
            cmd_tx: cmd_tx.clone(),
            accepted: inbound.as_ref().map(|i| i.accepted.clone()),
            datagrams: Some(dg_tx),
            on_packet: None,
            events: Some(ev_tx),
            clock,
            gate: None,
            credit: None,
        };
        let handle = AbortOnDrop(tokio::spawn(task.run()));
        let _ = tx.send(Some(cmd_tx.clone()));
        self.client.paths.session_started(self.now(), &started);
        if links.is_tcp(est.first) {
            self.client.paths.mark_tcp(est.first);
        }
        Live {
            handle,
            links,
            cmd_tx,
            ev_rx,
            meta,
            _dispatcher,
            _inbound: inbound,
        }
    }

    /// The paths of a new session, as the handshake bound them: added to `session` (the
    /// first is in it already; a TCP one frames packets of any size) and to `links`. The
    /// (slot, id, where bound) of those added.
    fn first_paths(
        &mut self,
        session: &mut Session,
        now: braid_core::Instant,
        est: &Established,
        mut first_tcp: Option<tokio::net::TcpStream>,
        links: &mut Links,
    ) -> Vec<(usize, PathId, crate::pathmgr::Attach)> {
        let mut started = Vec::new();
        for b in &est.paths {
            let id = b.slot as PathId;
            // Each path's own datagram size (its family's header, its route's MTU); a TCP
            // path frames packets of any size.
            let tcp = id == est.first && first_tcp.is_some();
            session.set_path_max_datagram(now, id, if tcp { 0 } else { b.max_datagram });
            if id != est.first {
                if let Err(e) = session.add_path(now, id) {
                    warn!(path = %self.name(b.slot), "cannot add the path: {e}");
                    continue;
                }
            }
            (self.policy_fn(b.slot, id))(session, now);
            session.set_path_name(now, id, &self.cfg.paths[b.slot].name);
            started.push((b.slot, id, b.attach));
            self.set_status(b.slot, PathStatus::Validating);
            match first_tcp.take_if(|_| id == est.first) {
                Some(stream) => {
                    let name = self.cfg.paths[b.slot].name.clone();
                    links.add_tcp(id, 0, stream, &name, est.server);
                }
                None => links.add_udp(id, b),
            }
        }
        started
    }

    /// Datagrams the session delivers, to their flow (a proxied UDP association's, or an
    /// inbound port's).
    fn dispatcher(
        shared: &Shared,
        inbound: Option<mpsc::Sender<Bytes>>,
        mut dg_rx: mpsc::Receiver<Bytes>,
    ) -> Task {
        let flows = shared.flows.clone();
        Task(tokio::spawn(async move {
            while let Some(d) = dg_rx.recv().await {
                let Ok(p) = datagram::parse(&d) else { continue };
                let tx = match braid_proxy::inbound::inbound_port(p.flow_id) {
                    Some(_) => inbound.clone(),
                    None => flows.lock().ok().and_then(|m| m.get(&p.flow_id).cloned()),
                };
                if let Some(tx) = tx {
                    let _ = tx.try_send(d);
                }
            }
        }))
    }
}
