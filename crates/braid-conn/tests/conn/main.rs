//! braid-conn's integration tests: one test binary, one module per file.

mod connection;
