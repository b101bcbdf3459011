//! The aggregate against the share of connections that can use a braid server (0, 25, 50,
//! 100 %), direct connections placed by the connection-level scheduler: the table in
//! docs/results.md ("Direct mode"). Run with `--nocapture` to see it.

use braid_core::connsched::ConnPolicy;
use braid_sim::connmix::{paper_links, run, MixConfig};

#[test]
fn aggregate_against_the_share_of_connections_with_a_server() {
    let links = paper_links();
    let sum: f64 = links.iter().map(|l| l.rate).sum();
    let best = links.iter().map(|l| l.rate).fold(0.0, f64::max);
    println!(
        "links 1, 0.7, 2 Mbit/s (sum {:.2}); connections back to back, 90 % 20 KB, 10 % 500 KB; 600 s",
        sum * 8e-6
    );
    println!("policy          at once  share  Mbit/s  of sum  vs best link  J/MB   connections");
    for (name, policy, workers) in [
        ("throughput", ConnPolicy::Throughput, 2),
        ("throughput", ConnPolicy::Throughput, 8),
        ("operetta a=0.5", ConnPolicy::Operetta { alpha: 0.5 }, 8),
        ("operetta a=0", ConnPolicy::Operetta { alpha: 0.0 }, 8),
    ] {
        let mut first: Option<f64> = None;
        for share in [0.0, 0.25, 0.5, 1.0] {
            let o = run(&MixConfig {
                workers,
                ..MixConfig::paper(share, policy)
            });
            println!(
                "{name:<15} {workers:>7}  {:>4.0} %  {:>6.2}  {:>6.3}  {:>11.2}  {:>5.2}  {:>11}",
                share * 100.0,
                o.throughput * 8e-6,
                o.throughput / sum,
                o.throughput / best,
                o.j_per_mb,
                o.connections
            );
            let none = *first.get_or_insert(o.throughput);
            if share == 1.0 && name == "operetta a=0.5" {
                // The session is held to the target (0.7 + 0.5 x (1 + 2) Mbit/s); direct
                // connections, placed whole, may overshoot it (since issue 25 connsched
                // measures the links well enough that they do).
                let target = (0.7 + 0.5 * 3.0) * 1e6 / 8.0;
                assert!(o.throughput >= 0.95 * target, "{name}: {o:?}");
            } else if share == 1.0 {
                // Every connection through the server: every link full, whatever the mix
                // (at alpha 0: the one cheapest link either way, to within 1 %).
                assert!(
                    o.throughput >= 0.99 * none,
                    "{name}: all through a server is worse"
                );
                if name == "throughput" {
                    assert!(o.throughput >= 0.95 * sum, "{name}: {o:?}");
                }
            }
        }
    }
}
