//! The `braid` binary's tests, in one binary: signals, the descriptor limit and the soaks, each
//! running real `braid` processes.

mod soakrig;

mod fd_limit;
mod package;
mod pipes;
mod pkgrig;
mod signals;
mod soak_flap;
mod soak_memory;
