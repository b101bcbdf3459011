//! The silence watch's hands: what [`Watch`](crate::agent::client::silence::Watch) (the
//! client's, sans-IO) decides once per tick, done to the running session: pings sent,
//! probe handshakes started and stopped, a probe's new session kept until it replaces the
//! old one or is dropped.
//!
//! Owns: [`Silence`] (the probe task and the new session it got). Must not touch: the
//! decisions (`client::silence`), the handshake itself (`handshake`), switching sessions
//! (`run`).

use super::*;
use crate::agent::client::silence::{Probe, PROBE_ROUNDS};

/// The tokio side of the silence watch of one session.
#[derive(Default)]
pub(super) struct Silence {
    /// A probe's new session, used unless the old one answers in time.
    pub(super) pending: Option<Established>,
    /// The probe under way.
    pub(super) probe: Option<JoinHandle<Result<Established, String>>>,
}

impl Runner {
    /// Make the session send a PING on every path now (answered by an ACK if the server
    /// still knows the session).
    pub(super) fn poke(&self, cmd: &mpsc::UnboundedSender<Cmd>) {
        let _ = cmd.send(Cmd::Session(SessionFn(Box::new(|s, now| {
            s.ping_paths(now)
        }))));
    }

    /// Feed the paths' counters to the client's silence watch and do what it says.
    pub(super) fn watch_silence(
        &mut self,
        cmd: &mpsc::UnboundedSender<Cmd>,
        stats: &[(PathId, PathStats)],
        s: &mut Silence,
    ) {
        let rx: u64 = stats.iter().map(|s| s.1.packets_received).sum();
        let tx: u64 = stats.iter().map(|s| s.1.packets_sent).sum();
        let srtt = Duration::from_micros(stats.iter().map(|s| s.1.srtt_us).max().unwrap_or(0));
        let hints = self.keys.hints.load(std::sync::atomic::Ordering::Relaxed);
        let now = tokio::time::Instant::now().into_std();
        let t = self.client.silence.tick(now, rx, tx, srtt, hints);
        if t.keep && s.pending.take().is_some() {
            info!("the old session answered again (the network was out): keeping it");
        }
        if t.stop_probe {
            if let Some(p) = s.probe.take() {
                p.abort();
            }
        }
        if t.poke {
            self.poke(cmd);
        }
        match t.probe {
            Some(Probe::Hinted) => {
                // Not authenticated: only a reason to try a handshake now. The session is
                // replaced only if it succeeds and the old session stays silent.
                info!(server = %self.server, "the server says it does not know this session: shaking hands again now");
                self.start_probe(s);
            }
            Some(Probe::Silent(quiet)) => {
                info!(server = %self.server, "no answer from the server for {quiet:?}: probing with a new handshake");
                self.start_probe(s);
            }
            None => {}
        }
    }

    /// A new handshake on every available path to every server, while the session goes on,
    /// in the rounds [`PROBE_ROUNDS`] says, each from new sockets.
    fn start_probe(&mut self, s: &mut Silence) {
        let avail = self.avail();
        if avail.is_empty() {
            return;
        }
        let cfg = self.cfg.clone();
        let probe = tokio::spawn(async move {
            match handshake::handshake(&cfg, &avail, PROBE_ROUNDS[0]).await {
                Ok(est) => Ok(est),
                Err(_) => handshake::handshake(&cfg, &avail, PROBE_ROUNDS[1]).await,
            }
        });
        s.probe = Some(probe);
        self.client.silence.probe_started();
    }

    /// The probe ended: answered, the old session is pinged and gets a little time to
    /// answer before the new session replaces it; unanswered, the next probe waits.
    pub(super) fn probe_ended(
        &mut self,
        r: Result<Result<Established, String>, tokio::task::JoinError>,
        cmd: &mpsc::UnboundedSender<Cmd>,
        s: &mut Silence,
    ) {
        let now = tokio::time::Instant::now().into_std();
        match r {
            Ok(Ok(est)) => {
                // The network may just have come back after a blackout (the old session
                // is fine): make the old session speak now, and switch only if it stays
                // silent.
                info!(server = %est.server, "probe answered; checking whether the old session still answers");
                self.poke(cmd);
                self.client.silence.probe_answered(now);
                s.pending = Some(est);
            }
            Ok(Err(e)) => {
                debug!("probe handshake: {e}");
                self.client.silence.probe_failed(now);
            }
            Err(_) => self.client.silence.probe_gone(),
        }
    }
}
