//! `Scenario::from_toml_str` on arbitrary text (and both trace parsers on the same text): never
//! panic. Accepted scenarios also go through the runner's planning step.
//!
//! The scenario's file path is taken inside the repository's `scenarios/`, so inputs that
//! name `traces/example.csv` load the real trace. Seed the corpus with the shipped
//! scenarios (see README.md).

#![no_main]

use braid_sim::runner::{plan, session_config};
use braid_sim::scenario::Scenario;
use braid_sim::trace::Trace;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = Trace::parse(text, "fuzz.csv") {
        let _ = t.mean_rate();
    }
    if let Ok(t) = Trace::parse_mahimahi(text, "fuzz.mm") {
        let _ = t.mean_rate();
        let _ = t.bits_between(0, 3_000_000_000);
        let _ = t.time_to_send(1_234_567, 1e7);
    }
    let file = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/fuzz.toml"
    ));
    let scn = match Scenario::from_toml_str(text, file) {
        Ok(s) => s,
        Err(e) => {
            // Errors always render.
            let _ = e.to_string();
            return;
        }
    };
    if let Ok(plans) = plan(&scn) {
        for p in &plans {
            let _ = session_config(&scn, p, scn.seed);
        }
    }
});
