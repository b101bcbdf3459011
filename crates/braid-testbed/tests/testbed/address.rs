//! The testbed's address-change fault (`--fault addr:PATH:AT`) over real kernels: the
//! renumbering itself, and a braid transfer through one. Root and namespaces are needed;
//! elsewhere each test prints why it skips.

use crate::SERIAL;
use braid_testbed::cmd::ip_ns;
use braid_testbed::faults::renumber::{renumbered, AddressFaults};
use braid_testbed::faults::FaultKind;
use braid_testbed::lock::{RunLock, LOCK_FILE};
use braid_testbed::netns::Topology;
use braid_testbed::{run_scenario, unavailable_reason, RunOptions};
use std::path::Path;
use std::time::Duration;

/// The client namespace's addresses on `dev` and its policy rules, as `ip` prints them.
fn addresses_and_rules(topo: &Topology, dev: &str) -> (String, String) {
    let addr = ip_ns(&topo.client, &["-4", "-br", "addr", "show", "dev", dev]).unwrap();
    let rules = ip_ns(&topo.client, &["rule", "show"]).unwrap();
    (addr, rules)
}

/// The fault moves the address and its policy rule at its time, and puts both back when
/// the transfer's injector finishes.
#[test]
fn an_address_change_renumbers_the_path_and_puts_it_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = unavailable_reason() {
        println!("skipping an_address_change_renumbers_the_path_and_puts_it_back: {why}");
        return;
    }
    let _lock = RunLock::acquire(Path::new(LOCK_FILE)).expect("run lock");
    let topo = Topology::create(&format!("ad{:x}", std::process::id() % 0xfffff), 2).unwrap();
    let l = topo.paths[1].clone();
    let (old, new) = (l.client_ip.to_string(), renumbered(l.client_ip).to_string());
    let inj = AddressFaults::start(&topo.client, vec![(l.clone(), Duration::from_millis(50))])
        .expect("injector");
    let (addr, rules) = addresses_and_rules(&topo, &l.client_if);
    assert!(addr.contains(&format!("{old}/24")), "not yet: {addr}");
    std::thread::sleep(Duration::from_millis(400));
    let (addr, rules_during) = addresses_and_rules(&topo, &l.client_if);
    assert!(
        addr.contains(&format!("{new}/24")) && !addr.contains(&format!("{old}/")),
        "{addr}"
    );
    assert!(
        rules_during.contains(&format!("from {new} lookup 101"))
            && !rules_during.contains(&format!("from {old} ")),
        "{rules_during}"
    );
    let route = ip_ns(&topo.client, &["route", "get", "10.2.1.1", "from", &new]).unwrap();
    assert!(route.contains(&format!("dev {}", l.client_if)), "{route}");
    inj.finish();
    let (addr, rules_after) = addresses_and_rules(&topo, &l.client_if);
    assert!(
        addr.contains(&format!("{old}/24")) && !addr.contains(&format!("{new}/")),
        "{addr}"
    );
    assert!(
        rules_after.contains(&format!("from {old} lookup 101")),
        "{rules_after}"
    );
    assert_eq!(
        rules_after.lines().count(),
        rules.lines().count(),
        "{rules_after}"
    );
}

/// braid through an address change of one of its two paths: reported as one, the transfer
/// arrives, the agent follows the path to its new address (given by its interface) so the
/// call (the probe, through the agent's SOCKS5 UDP) has no long gap. ~12 s.
#[test]
fn braid_follows_an_address_change() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = unavailable_reason() {
        println!("skipping braid_follows_an_address_change: {why}");
        return;
    }
    let scn = braid_sim::Scenario::from_toml_str(
        "name = \"renumber\"\n[[path]]\nname = \"a\"\nrate = \"20Mbit\"\ndelay = \"5ms\"\n\
         [[path]]\nname = \"b\"\nrate = \"10Mbit\"\ndelay = \"10ms\"\n\
         [workload]\nsize = \"15MB\"\n[[variant]]\nname = \"braid\"\n",
        Path::new("renumber.toml"),
    )
    .unwrap();
    let opts = RunOptions {
        handle_signals: false,
        faults: vec!["addr:a:2s".parse().unwrap()],
        ..RunOptions::default()
    };
    let rep = run_scenario(&scn, &opts, |_| {}).expect("run");
    print!("{}", braid_testbed::faults::table(&rep.faults));
    assert!(
        rep.report.all_verified(),
        "{:?}",
        rep.report.results[0].error
    );
    assert_eq!(rep.faults.len(), 1, "{:?}", rep.faults);
    let f = &rep.faults[0];
    assert_eq!((f.fault.kind, f.fault.at_s), (FaultKind::Address, 2.0));
    let gap = f.probe_longest_gap_s.expect("probe gap");
    assert!(gap < 0.5, "probe gap {gap} s around the address change");
    // Back to 80 % of the rate before: only with path a again (b alone is a third of it).
    let rec = f.time_to_recovery_s.expect("recovery");
    assert!(rec < 2.0, "recovered {rec} s after the change");
}
