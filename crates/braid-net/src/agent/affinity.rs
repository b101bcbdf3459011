//! Are all paths of a session on one server? A braid server answers message 1 of a session
//! id once (the first that reaches it; the others it drops), so two valid answers for one
//! session id, on two paths, from the one address the agent asked, come from two servers
//! behind that address: a load balancer or anycast address that sends each source address
//! and port to its own server. Unless the winner named its own unicast address (`braid
//! server --unicast`, which moves every path there), such a session would run on the
//! winner's path only while the other paths' packets reach a server that cannot read them:
//! the handshake fails instead, with what to do.
//!
//! Owns: the decisions (whether and how long to wait for the other paths' answers after the
//! first, and whether they show a split) and the error's wording. Must not touch: sockets
//! and the handshake's state (`handshake` feeds it the answers).

use std::net::SocketAddr;
use std::time::Duration;

/// A valid handshake answer: the path it came on, the server address asked, and the
/// address the server named as its own, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Answer {
    pub path: usize,
    pub asked: SocketAddr,
    pub own: Option<SocketAddr>,
}

/// How long to keep listening after the first answer (which took `answered_after` from the
/// last round's sending): four times that, at least 30 ms and at most 400 ms. Other paths'
/// answers come within their own round trip; a path more than four times slower than the
/// winner's is not waited for.
pub(super) const GRACE_MIN: Duration = Duration::from_millis(30);
pub(super) const GRACE_MAX: Duration = Duration::from_millis(400);

/// The wait after the first answer, or `None` when there is nothing to check: the winner
/// named its own address, or no other path (`others`: the paths that asked the winner's
/// address directly, not through a relay) could be answered by another server.
pub(super) fn grace(winner: &Answer, others: usize, answered_after: Duration) -> Option<Duration> {
    if winner.own.is_some() || others == 0 {
        return None;
    }
    Some((answered_after * 4).clamp(GRACE_MIN, GRACE_MAX))
}

/// The paths (other than the winner's) that a second server answered for the address the
/// winner was asked at; empty when the winner named its own address (the session goes
/// there whoever else answered).
pub(super) fn split(winner: &Answer, later: &[Answer]) -> Vec<usize> {
    if winner.own.is_some() {
        return Vec::new();
    }
    let mut v: Vec<usize> = later
        .iter()
        .filter(|a| a.path != winner.path && a.asked == winner.asked)
        .map(|a| a.path)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The error for a split: paths `first` (the winner's) and `others` reached different
/// servers behind `asked`.
pub(super) fn split_error(asked: SocketAddr, first: &str, others: &[&str]) -> String {
    format!(
        "the paths of one session reached different servers behind {asked}: the handshake on \
         path {first} was answered by one server, on path {} by another (a load balancer or \
         anycast address that picks a server by source address and port; each path has its \
         own). A session \
         needs all its paths on one server: start every server with `--unicast` and its own \
         address (`braid server --unicast ADDR:PORT`, the agent then sends every path there), \
         or give the agent the servers' own addresses (--server, repeated) instead of the \
         balancer's (docs/deployment.md, \"Servers behind a load balancer\")",
        others.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(path: usize, asked: &str, own: Option<&str>) -> Answer {
        Answer {
            path,
            asked: asked.parse().unwrap(),
            own: own.map(|o| o.parse().unwrap()),
        }
    }

    const VIP: &str = "10.70.0.1:4433";

    #[test]
    fn answers_of_two_servers_on_two_paths_to_one_address_are_a_split() {
        let w = a(0, VIP, None);
        assert_eq!(split(&w, &[a(1, VIP, None)]), vec![1]);
        // Several paths, one of them answered by the winner's own server (not seen: it
        // drops a second message 1), one twice (counted once).
        assert_eq!(
            split(&w, &[a(2, VIP, None), a(1, VIP, None), a(2, VIP, None)]),
            vec![1, 2]
        );
    }

    #[test]
    fn a_winner_that_names_its_own_address_takes_the_whole_session() {
        let w = a(0, VIP, Some("10.72.0.2:4433"));
        assert!(split(&w, &[a(1, VIP, Some("10.72.1.2:4433"))]).is_empty());
        assert!(split(&w, &[a(1, VIP, None)]).is_empty());
        assert_eq!(grace(&w, 1, Duration::from_millis(5)), None);
    }

    #[test]
    fn other_addresses_and_the_winners_own_path_are_no_split() {
        let w = a(0, VIP, None);
        // Another configured server (--server twice) answering is the usual race.
        assert!(split(&w, &[a(1, "10.80.0.1:4433", None)]).is_empty());
        // The winner's path again (a duplicate) says nothing.
        assert!(split(&w, &[a(0, VIP, None)]).is_empty());
        assert!(split(&w, &[]).is_empty());
    }

    #[test]
    fn the_wait_is_four_answer_times_within_its_bounds_and_none_without_other_paths() {
        let w = a(0, VIP, None);
        assert_eq!(grace(&w, 0, Duration::from_millis(50)), None);
        let g = |ms| grace(&w, 1, Duration::from_millis(ms)).unwrap();
        assert_eq!(g(1), GRACE_MIN);
        assert_eq!(g(20), Duration::from_millis(80));
        assert_eq!(g(500), GRACE_MAX);
    }

    #[test]
    fn the_error_names_the_paths_and_what_to_do() {
        let e = split_error(VIP.parse().unwrap(), "wifi", &["lte"]);
        for part in [
            "10.70.0.1:4433",
            "wifi",
            "lte",
            "--unicast",
            "--server",
            "deployment.md",
        ] {
            assert!(e.contains(part), "{part} missing in {e}");
        }
    }
}
