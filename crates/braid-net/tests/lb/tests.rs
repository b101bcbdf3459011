//! The load-balancer tests (issue 24, item 3): several braid servers behind a real load
//! balancer (nftables DNAT by a hash of the source address and port, `lbrig`). Each path
//! of a session has its own source address and port, so without `--unicast` the paths of
//! one session reach different servers; with it, each server names its own address in the
//! handshake answer and the whole session goes there.

use crate::common::{body, sha};
use crate::lbrig::{get, server_addr, Lb, Options, SERVERS};
use crate::nsrig::{nft_drop, skip};
use braid_net::agent::{Agent, PathStatus};
use braid_net::status::AgentStatus;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const AGENTS: usize = 20;
/// The agents' source addresses: path a's link and path b's.
const LINKS: [&str; 2] = ["10.71.1.1", "10.71.2.1"];
const SIZE: usize = 4 << 20;
/// A dead server's agents must carry data through another within this.
const RESUME_BAR: Duration = Duration::from_secs(3);

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BRAID_TEST_LOG"))
        .with_test_writer()
        .try_init();
}

/// Run `f(lb)` on a fresh runtime in the agents' namespace; give the rig back.
fn in_agents<T, F, Fut>(lb: Lb, f: F) -> (Lb, T)
where
    T: Send + 'static,
    F: FnOnce(Lb) -> Fut + Send + 'static,
    Fut: Future<Output = (Lb, T)>,
{
    let ns = lb.a.clone();
    crate::nsrig::on(&ns, move || f(lb))
}

/// Start `n` agents and wait until each has a session with both paths up.
async fn start_agents(lb: &Lb, n: usize) -> Vec<Agent> {
    let mut agents = Vec::new();
    for i in 0..n {
        agents.push(Agent::start(lb.agent_cfg(i)).await.unwrap());
    }
    for (i, a) in agents.iter_mut().enumerate() {
        assert!(
            a.wait_established(Duration::from_secs(10)).await,
            "agent {i}: no session: {:?}",
            a.status().snapshot().session_error
        );
        for p in ["a", "b"] {
            assert!(
                a.wait_path(p, PathStatus::Up, Duration::from_secs(10))
                    .await,
                "agent {i}: path {p} not up: {:?}",
                a.paths()
            );
        }
    }
    agents
}

/// The server (index) agent `st`'s session is on, by the address it names.
fn server_of(st: &AgentStatus) -> usize {
    let s = st.session.as_ref().expect("a session");
    (0..SERVERS)
        .find(|k| server_addr(*k).to_string() == s.server)
        .unwrap_or_else(|| panic!("session on {}, not a server's own address", s.server))
}

/// Every agent's session is on the server it names, with both its paths (their source
/// addresses as the agent's sockets have them); another server may only hold the
/// half-open session a losing message 1 made (not established, no path but one). Returns
/// how many sessions each server carries.
fn check_one_server_per_session(lb: &Lb, agents: &[Agent]) -> Vec<usize> {
    let servers: Vec<serde_json::Value> = (0..SERVERS).map(|k| lb.status(k)).collect();
    let mut per = vec![0; SERVERS];
    for (i, a) in agents.iter().enumerate() {
        let st = a.status().snapshot();
        let k = server_of(&st);
        per[k] += 1;
        let id = &st.session.as_ref().unwrap().id;
        // The source addresses: the agent's two links. Not the ports: the balancer is
        // also the agents' router here, and conntrack gives a path's packets to the
        // server's own address another source port, as their answers would clash with
        // those of the handshake to the service address from the same port.
        let locals: BTreeSet<String> = LINKS.iter().map(|a| a.to_string()).collect();
        for (j, s) in servers.iter().enumerate() {
            let found: Vec<&serde_json::Value> = s["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["id"] == id.as_str())
                .collect();
            if j == k {
                assert_eq!(found.len(), 1, "agent {i}: session {id} on server {k}: {s}");
                let remotes: BTreeSet<String> = found[0]["paths"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let a = p["remote_address"].as_str().unwrap_or("");
                        a.rsplit_once(':').map_or(a, |x| x.0).to_string()
                    })
                    .collect();
                assert_eq!(
                    found[0]["paths"].as_array().unwrap().len(),
                    2,
                    "{}",
                    found[0]
                );
                assert_eq!(
                    remotes, locals,
                    "agent {i}: server {k} lists session {id} with other path addresses"
                );
                assert_eq!(found[0]["established"], true, "agent {i}: {}", found[0]);
            } else {
                for f in found {
                    assert_eq!(
                        f["established"], false,
                        "agent {i}: session {id} is established on server {j} too: {f}"
                    );
                    assert!(f["paths"].as_array().unwrap().len() <= 1, "{f}");
                }
            }
        }
    }
    per
}

/// One GET of the failover load: (agent, started, first byte, body verified).
type Try = (usize, Instant, Option<Instant>, bool);

/// Agent `i`'s load: a 16 KiB GET every 100 ms (each given up after 6 s), until `stop`.
fn load(
    i: usize,
    socks: std::net::SocketAddr,
    tries: Arc<Mutex<Vec<Try>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    const SMALL: usize = 16 << 10;
    tokio::spawn(async move {
        let want = sha(&body(SMALL));
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let (tries, want) = (tries.clone(), want.clone());
            tokio::spawn(async move {
                let t = Instant::now();
                let r = tokio::time::timeout(Duration::from_secs(6), get(socks, SMALL)).await;
                let (first, ok) = match r {
                    Ok(Ok(g)) => (g.first_byte, sha(&g.body) == want),
                    _ => (None, false),
                };
                tries.lock().unwrap().push((i, t, first, ok));
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Issue 24's bar for a load balancer: 3 servers with `--unicast` behind the nftables
/// balancer, 20 agents with 2 paths each downloading 4 MiB at once: every download exact,
/// every session's two paths on one server (its `braid status --json` lists the session
/// with both source addresses), sessions on at least two servers. Then the busiest server is
/// killed (SIGKILL): each of its agents gets the first byte of an answer through a new
/// session on another server within 3 s of the kill.
#[test]
fn with_unicast_twenty_agents_keep_each_session_on_one_server_and_leave_a_dead_one_within_3_s() {
    if skip() {
        return;
    }
    logs();
    let t_all = Instant::now();
    let lb = Lb::new(&Options {
        unicast: true,
        agents: AGENTS,
        by_source_ip: false,
    });
    let (lb, ()) = in_agents(lb, |mut lb| async move {
        let t = Instant::now();
        let agents = start_agents(&lb, AGENTS).await;
        eprintln!(
            "{AGENTS} agents up with both paths in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let dls: Vec<_> = agents
            .iter()
            .map(|a| tokio::spawn(get(a.socks.unwrap(), SIZE)))
            .collect();
        let want = sha(&body(SIZE));
        for (i, d) in dls.into_iter().enumerate() {
            let g = d
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("agent {i}: {e}"));
            assert_eq!(g.body.len(), SIZE, "agent {i}: length");
            assert_eq!(sha(&g.body), want, "agent {i}: SHA-256");
        }
        let took = t.elapsed();
        eprintln!(
            "{AGENTS} downloads of {} MiB at once, all exact, in {:.2} s ({:.0} Mbit/s together)",
            SIZE >> 20,
            took.as_secs_f64(),
            (AGENTS * SIZE * 8) as f64 / took.as_secs_f64() / 1e6
        );
        tokio::time::sleep(Duration::from_millis(300)).await; // a status tick
        let per = check_one_server_per_session(&lb, &agents);
        eprintln!("sessions per server: {per:?}");
        // Which server keeps a session is the first to answer one of its two paths, so a
        // busier server wins fewer: all three holding one is likely, not certain (one in
        // ten runs left one empty: [14, 6, 0] in CI). Two is what the rest needs.
        assert!(
            per.iter().filter(|n| **n > 0).count() >= 2,
            "sessions all on one server: {per:?}"
        );

        // Failover: kill the busiest server under a steady load on its agents.
        let victim = (0..SERVERS).max_by_key(|k| per[*k]).unwrap();
        let movers: Vec<usize> = (0..AGENTS)
            .filter(|i| server_of(&agents[*i].status().snapshot()) == victim)
            .collect();
        let tries = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for &i in &movers {
            load(i, agents[i].socks.unwrap(), tries.clone(), stop.clone());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let killed = lb.kill(victim);
        let mut resumed = vec![None; AGENTS];
        while killed.elapsed() < Duration::from_secs(8) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            for (i, started, first, ok) in tries.lock().unwrap().iter() {
                if *started >= killed && *ok {
                    let d = first.unwrap().duration_since(killed);
                    resumed[*i] = Some(resumed[*i].map_or(d, |x: Duration| x.min(d)));
                }
            }
            if movers.iter().all(|i| resumed[*i].is_some()) {
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let ms: Vec<String> = movers
            .iter()
            .map(|i| resumed[*i].map_or("never".into(), |d| format!("{}", d.as_millis())))
            .collect();
        eprintln!(
            "server {victim} killed: its {} agents' first byte through a new session after [{}] ms",
            movers.len(),
            ms.join(", ")
        );
        for &i in &movers {
            let d = resumed[i].unwrap_or_else(|| panic!("agent {i} never resumed"));
            assert!(
                d <= RESUME_BAR,
                "agent {i} resumed after {d:?} (bar {RESUME_BAR:?})"
            );
            let k = server_of(&agents[i].status().snapshot());
            assert_ne!(k, victim, "agent {i} still names the dead server");
        }
        for a in agents {
            a.shutdown(Duration::from_secs(1)).await;
        }
        (lb, ())
    });
    drop(lb);
    eprintln!("test took {:.1} s", t_all.elapsed().as_secs_f64());
}

/// Without `--unicast`, behind a balancer with source-IP affinity (each of an agent's
/// links goes to another server): the handshake is answered by two servers, one per path.
/// The agent refuses that session and says what happened and what to do, instead of
/// running on one path while the other's packets reach a server that cannot read them
/// (which it did before: a session "up" with path b never validating).
#[test]
fn without_unicast_an_agent_whose_paths_reach_two_servers_says_so_and_runs_no_session() {
    if skip() {
        return;
    }
    logs();
    let t_all = Instant::now();
    let lb = Lb::new(&Options {
        unicast: false,
        agents: 2,
        by_source_ip: true,
    });
    let (lb, ()) = in_agents(lb, |lb| async move {
        let mut agents = Vec::new();
        for i in 0..2 {
            agents.push(Agent::start(lb.agent_cfg(i)).await.unwrap());
        }
        for (i, a) in agents.iter_mut().enumerate() {
            let up = a.wait_established(Duration::from_secs(2)).await;
            let st = a.status().snapshot();
            assert!(
                !up,
                "agent {i}: a session across two servers: {:?}",
                st.session
            );
            let e = st.session_error.unwrap_or_default();
            eprintln!("agent {i}: {e}");
            let parts = [
                "reached different servers behind 10.70.0.1:4433",
                "the handshake on path ",
                "--unicast",
            ];
            for part in parts {
                assert!(
                    e.contains(part),
                    "agent {i}: {part:?} not in the error {e:?}"
                );
            }
        }
        for a in agents {
            a.shutdown(Duration::from_secs(1)).await;
        }
        (lb, ())
    });
    drop(lb);
    eprintln!("test took {:.1} s", t_all.elapsed().as_secs_f64());
}

/// The agents' TCP fallback through the balancer: UDP to the braid port blocked on both of
/// the agents' links, servers with `--unicast`. The handshake goes over TCP to the service
/// address (the balancer's TCP rule picks a server), the server names its own address, and
/// the second path's TCP connection goes there: both paths on one server, a download exact.
#[test]
fn with_udp_blocked_the_session_comes_over_tcp_through_the_balancer_onto_one_server() {
    if skip() {
        return;
    }
    logs();
    let t_all = Instant::now();
    let lb = Lb::new(&Options {
        unicast: true,
        agents: 2,
        by_source_ip: false,
    });
    nft_drop(&lb.a, "output", "udp dport 4433");
    let (lb, ()) = in_agents(lb, |lb| async move {
        let t = Instant::now();
        let agents = start_agents(&lb, 2).await;
        eprintln!(
            "2 agents up over TCP with both paths in {:.2} s",
            t.elapsed().as_secs_f64()
        );
        let want = sha(&body(1 << 20));
        for (i, a) in agents.iter().enumerate() {
            let g = get(a.socks.unwrap(), 1 << 20)
                .await
                .unwrap_or_else(|e| panic!("agent {i}: {e}"));
            assert_eq!(sha(&g.body), want, "agent {i}: SHA-256");
        }
        tokio::time::sleep(Duration::from_millis(300)).await; // a status tick
        let per = check_one_server_per_session(&lb, &agents);
        eprintln!("sessions per server: {per:?}");
        for a in agents {
            a.shutdown(Duration::from_secs(1)).await;
        }
        (lb, ())
    });
    drop(lb);
    eprintln!("test took {:.1} s", t_all.elapsed().as_secs_f64());
}
