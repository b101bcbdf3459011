//! `braid-testbed`: the testbed without the rest of the `braid` command, for tests and for
//! machines without the full CLI. `braid-testbed run SCENARIO.toml [--json] [--fault
//! carrier:PATH:AT:DURATION]...` does what
//! `braid testbed run` does (without the progress bar); exit status 0 when every transfer
//! verified, 1 when one did not, 2 on errors.

use braid_sim::Scenario;
use braid_testbed::{run_scenario, RunOptions};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str =
    "usage: braid-testbed run SCENARIO.toml [--json] [--fault carrier:PATH:AT:DURATION]...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut file, mut json) = (None, false);
    let mut opts = RunOptions::default();
    match args.first().map(String::as_str) {
        Some("run") => {}
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--fault" => match it.next().map(|f| f.parse()) {
                Some(Ok(f)) => opts.faults.push(f),
                Some(Err(e)) => {
                    eprintln!("braid-testbed: {e}");
                    return ExitCode::from(2);
                }
                None => {
                    eprintln!("braid-testbed: --fault needs a value\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            s if !s.starts_with('-') && file.is_none() => file = Some(PathBuf::from(s)),
            other => {
                eprintln!("braid-testbed: unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(file) = file else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let r = Scenario::load(&file)
        .map_err(braid_testbed::TestbedError::from)
        .and_then(|scn| {
            run_scenario(&scn, &opts, |p| {
                if !p.what.is_empty() {
                    eprintln!("braid-testbed: [{}/{}] {}", p.done, p.total, p.what);
                }
            })
        });
    match r {
        Ok(rep) => {
            if json {
                match serde_json::to_string(&rep) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("braid-testbed: encoding the report: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print!("{}", rep.report.table());
                print!("{}", braid_testbed::faults::table(&rep.faults));
            }
            if rep.report.all_verified() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("braid-testbed: {e}");
            ExitCode::from(2)
        }
    }
}
