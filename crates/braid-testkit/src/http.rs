//! Small HTTP/1.1 origin servers for tests: accept, read a request's head, answer it. The
//! rigs' web servers (the loopback rig's, the namespace rigs', the load balancer's) are
//! [`serve`] with an answer of their own.

use std::future::Future;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves every connection accepted on `l` until accepting fails, each on a task of its
/// own: once the request's head has come (a connection that ends before is dropped),
/// `handle(stream, head)` answers it (usually with [`respond`]).
pub async fn serve<F, Fut>(l: TcpListener, handle: F)
where
    F: Fn(TcpStream, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let handle = std::sync::Arc::new(handle);
    while let Ok((mut s, _)) = l.accept().await {
        let handle = handle.clone();
        tokio::spawn(async move {
            if let Some(head) = read_head(&mut s).await {
                handle(s, head).await;
            }
        });
    }
}

/// Reads a request's head, up to and with its blank line; `None` if the connection ends
/// first.
pub async fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).await.ok()?;
        head.push(b[0]);
    }
    Some(String::from_utf8_lossy(&head).to_string())
}

/// The `N` of a request `GET /N` (0 when the path is not a number).
pub fn requested_len(head: &str) -> usize {
    head.split_whitespace()
        .nth(1)
        .and_then(|p| p.trim_start_matches('/').parse().ok())
        .unwrap_or(0)
}

/// Answers `200 OK` with `body` (`Connection: close`), then closes the sending side.
pub async fn respond(s: &mut TcpStream, body: &[u8]) {
    let h = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(h.as_bytes()).await;
    let _ = s.write_all(body).await;
    let _ = s.shutdown().await;
}
