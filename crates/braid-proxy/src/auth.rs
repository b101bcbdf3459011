//! Credential checks shared by the SOCKS5 and HTTP front ends: constant-time comparison and
//! the `Basic` scheme of `Proxy-Authorization`.
//!
//! Owns: [`Credentials`], [`ct_eq`], Base64 decoding for `Basic`. Must not touch: sockets,
//! protocol state, logging (never print a password).
//!
//! No-panic contract: every function accepts any bytes; malformed input simply does not match.

/// A username and password that clients must present.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The username (1..=255 bytes to be usable with SOCKS5).
    pub user: String,
    /// The password (1..=255 bytes to be usable with SOCKS5).
    pub pass: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("pass", &"<redacted>")
            .finish()
    }
}

/// Why configured credentials cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// The username is empty or longer than 255 bytes.
    #[error("proxy username is {0} bytes; it must be 1 to 255 bytes (RFC 1929)")]
    UserLength(usize),
    /// The password is empty or longer than 255 bytes.
    #[error("proxy password is {0} bytes; it must be 1 to 255 bytes (RFC 1929)")]
    PassLength(usize),
    /// The username contains ':', which HTTP Basic cannot carry.
    #[error("proxy username contains ':', which HTTP Basic authentication cannot carry; choose a username without ':'")]
    ColonInUser,
}

impl Credentials {
    /// Credentials after checking that SOCKS5 and HTTP Basic can both carry them.
    pub fn new(user: impl Into<String>, pass: impl Into<String>) -> Result<Self, CredentialsError> {
        let (user, pass) = (user.into(), pass.into());
        if user.is_empty() || user.len() > 255 {
            return Err(CredentialsError::UserLength(user.len()));
        }
        if pass.is_empty() || pass.len() > 255 {
            return Err(CredentialsError::PassLength(pass.len()));
        }
        if user.contains(':') {
            return Err(CredentialsError::ColonInUser);
        }
        Ok(Credentials { user, pass })
    }

    /// True when `user` and `pass` match, compared in time that depends only on lengths.
    pub fn matches(&self, user: &[u8], pass: &[u8]) -> bool {
        // `&` rather than `&&`: always compare both.
        ct_eq(user, self.user.as_bytes()) & ct_eq(pass, self.pass.as_bytes())
    }

    /// True when `value` is a `Proxy-Authorization` header value of scheme `Basic` (any case)
    /// carrying these credentials.
    pub fn matches_basic(&self, value: &[u8]) -> bool {
        let value = trim(value);
        let Some(sp) = value.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (scheme, rest) = value.split_at(sp);
        if !scheme.eq_ignore_ascii_case(b"basic") {
            return false;
        }
        let Some(decoded) = base64_decode(trim(rest)) else {
            return false;
        };
        let Some(colon) = decoded.iter().position(|&b| b == b':') else {
            return false;
        };
        let (user, pass) = decoded.split_at(colon);
        self.matches(user, pass.get(1..).unwrap_or_default())
    }
}

/// Compares two byte strings in time that depends only on their lengths, not their contents.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Decodes standard Base64 (RFC 4648 §4), padding optional. `None` on any invalid input or
/// when the input is longer than 1024 bytes.
pub(crate) fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    if s.len() > 1024 {
        return None;
    }
    let mut s = s;
    for _ in 0..2 {
        if let [rest @ .., b'='] = s {
            s = rest;
        }
    }
    if s.len() % 4 == 1 {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 2);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            acc = (acc << 6) | val(c)?;
        }
        match chunk.len() {
            4 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
            3 => {
                acc <<= 6;
                out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8]);
            }
            2 => {
                acc <<= 12;
                out.push((acc >> 16) as u8);
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(!ct_eq(b"abc\0", b"abc"));
    }

    #[test]
    fn base64() {
        assert_eq!(base64_decode(b"dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert_eq!(base64_decode(b"YQ==").unwrap(), b"a");
        assert_eq!(base64_decode(b"YWI=").unwrap(), b"ab");
        assert_eq!(base64_decode(b"YWI").unwrap(), b"ab");
        assert!(base64_decode(b"Y").is_none());
        assert!(base64_decode(b"Y!==").is_none());
    }

    #[test]
    fn basic_header() {
        let c = Credentials::new("user", "pass").unwrap();
        assert!(c.matches_basic(b"Basic dXNlcjpwYXNz"));
        assert!(c.matches_basic(b"basic   dXNlcjpwYXNz "));
        assert!(!c.matches_basic(b"Bearer dXNlcjpwYXNz"));
        assert!(!c.matches_basic(b"Basic dXNlcjpwYXN6"));
        assert!(!c.matches_basic(b"Basic"));
        assert!(Credentials::new("", "x").is_err());
        assert!(Credentials::new("a:b", "x").is_err());
        assert!(Credentials::new("a".repeat(256), "x").is_err());
        assert!(!format!("{c:?}").contains("pass\""));
    }
}
