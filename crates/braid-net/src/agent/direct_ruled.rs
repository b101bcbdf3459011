//! `--bypass` and `--pin` in direct connections: a destination a rule names goes straight
//! to it whether or not a session is up (`--bypass`: on a path the scheduler picks;
//! `--pin`: on its path or not at all).
//!
//! Owns: choosing the pinned path and labelling the connection with its rule. Must not
//! touch: which destinations a rule names (`crate::rules`), the session.

use super::{Direct, Relay, Shared};
use crate::rules::Route;
use braid_core::connsched::{ConnId, PathInput};
use braid_proxy::target::ReplyCode;
use braid_proxy::TargetAddr;

impl Direct {
    /// Register a connection to `dest` on path `only` (`--pin`), whatever the scheduler
    /// would choose and whether or not the path failed lately.
    pub(in crate::agent) fn choose_only(&self, dest: &str, only: usize) -> Option<(ConnId, usize)> {
        let mut s = self.sched.lock().ok()?;
        for i in 0..self.binds.len() {
            s.set_path(
                i,
                PathInput {
                    usable: i == only,
                    power_w: self.power[i],
                    rate_hint: None,
                },
            );
        }
        let r = s.choose(self.now(), dest).ok();
        self.refresh(&mut s);
        r
    }

    /// The index of the path named `name`.
    pub(in crate::agent) fn path_index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}

/// A new TCP connection to `target` if a rule names it; `None`: no rule does.
pub(super) async fn open(shared: &Shared, target: &TargetAddr) -> Option<Result<Relay, ReplyCode>> {
    let route = shared.route(target);
    let (d, label) = (shared.direct.as_ref()?, route.label()?);
    let only = match &route {
        Route::Pin(p) => match d.path_index(p) {
            Some(i) => Some(i),
            None => return Some(Err(ReplyCode::NetworkUnreachable)),
        },
        _ => None,
    };
    Some(
        d.connect(target, only, tokio::time::Instant::now())
            .await
            .map(|mut c| {
                c.rule = label;
                Relay::Direct(c)
            }),
    )
}
