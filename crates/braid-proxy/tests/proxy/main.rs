//! braid-proxy's integration tests, in one binary: SOCKS5, HTTP CONNECT, the codecs and the
//! property tests.

mod codecs;
mod http;
mod proptests;
mod socks5;
