//! Issue 9: keepalives must not keep an idle cellular radio awake. "WiFi first, 3G on
//! standby" (walking, full coverage): with the agent's 25 s keepalive the idle 3G radio
//! costs a fraction of what the core's 5 s default costs, and the transfer is as fast.

use crate::common;

#[test]
fn a_25_s_keepalive_lets_an_idle_standby_radio_sleep() {
    let r = common::run_shipped("keepalive-standby.toml", &[]);
    let get = |v: &str| {
        r.results
            .iter()
            .find(|x| x.variant == v)
            .unwrap_or_else(|| panic!("variant {v}"))
    };
    let (wifi, ka5, ka25) = (
        get("wifi-only"),
        get("wifi-first-keepalive-5s"),
        get("wifi-first-keepalive-25s"),
    );
    // What the idle 3G radio costs on top of WiFi alone.
    let (idle5, idle25) = (ka5.energy_j - wifi.energy_j, ka25.energy_j - wifi.energy_j);
    eprintln!(
        "idle 3G on standby: {idle5:.1} J with 5 s keepalives, {idle25:.1} J with 25 s ({:.0} % less)",
        (1.0 - idle25 / idle5) * 100.0
    );
    assert!(idle25 < idle5 * 0.5, "{idle25:.1} J vs {idle5:.1} J");
    assert!(ka25.goodput_bps >= ka5.goodput_bps * 0.99);
}
