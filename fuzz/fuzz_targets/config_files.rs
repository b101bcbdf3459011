//! The files the server and agent read besides scenarios: the authorized-keys file, a key
//! file's line, and the replay-guard state file, on arbitrary bytes. Never a panic; what is
//! accepted writes back and reads again to the same thing.

#![no_main]

use braid_crypto::{parse_authorized, parse_public_key, ReplayGuard};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.conf");
    if let Ok(keys) = parse_authorized(path, data) {
        let text: String = keys.iter().map(|k| k.to_base64() + "\n").collect();
        assert_eq!(parse_authorized(path, text.as_bytes()).unwrap(), keys);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(k) = parse_public_key(text) {
        assert_eq!(parse_public_key(&k.to_base64()).unwrap(), k);
    }
    if let Ok(g) = ReplayGuard::from_text(text, path) {
        assert_eq!(ReplayGuard::from_text(&g.to_text(), path).unwrap(), g);
    }
});
