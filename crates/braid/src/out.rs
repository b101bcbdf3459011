//! The commands' output on stdout. A reader that went away (`braid status | head`) ends
//! the command quietly, with exit status 0, as Unix filters expect, instead of the panic
//! `println!` gives (exit 101); any other failure to write says so and exits 2.
//!
//! Owns: every write of the binary to stdout (`out!`, `outln!`). Must not touch: stderr
//! and the logs (tracing's), what the commands print.

use std::io::Write;

/// Write `args` to stdout and flush; a broken pipe ends the process quietly.
pub(crate) fn write_fmt(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        failed(&e)
    }
}

/// The end of a command whose output cannot be written.
fn failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!(
        "braid: cannot write the output to stdout: {e} (is the disk or the pipe's reader gone?)"
    );
    std::process::exit(2)
}

/// `print!` that ends the command quietly when stdout's reader went away.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::out::write_fmt(format_args!($($t)*))
    };
}

/// `println!` that ends the command quietly when stdout's reader went away.
macro_rules! outln {
    () => {
        $crate::out::write_fmt(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::out::write_fmt(format_args!("{}\n", format_args!($($t)*)))
    };
}
