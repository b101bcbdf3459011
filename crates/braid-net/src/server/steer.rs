//! Which worker owns a session, and the kernel doing that choice for us: 2N UDP sockets on
//! the listen address with SO_REUSEPORT, and a classic-BPF program
//! (SO_ATTACH_REUSEPORT_CBPF) that picks the socket from the session id and the type in the
//! braid header, so that every packet of a session, its handshake included, reaches the
//! worker that owns it. Each worker has two sockets: transport packets go to the first,
//! everything else (handshakes, cookies asked for, garbage) to the second, so that a flood
//! of handshake packets fills the second one's buffer and the kernel drops the flood
//! there, never the acknowledgements of live sessions.
//!
//! Owns: [`Steering::worker_of`] and its BPF twin (the same arithmetic), binding the
//! worker sockets. Must not touch: what the packets mean, the sockets' use.
//!
//! The agent chooses its session id (braid-crypto's handshake), so the choice is mixed with
//! a per-server random odd multiplier: an agent, or a spoofer, cannot aim its sessions at
//! one worker on purpose. One that sends many handshakes to get there anyway pays the
//! same per-address rate limit, cookies and session limit as with one worker, which all
//! workers share.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// Maps a session id to its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steering {
    workers: u32,
    /// Odd: multiplying by it is a bijection of u32.
    mix: u32,
}

impl Steering {
    /// `workers` workers (at least 1), the id mixed with `mix` (made odd).
    pub fn new(workers: usize, mix: u32) -> Steering {
        Steering {
            workers: workers.clamp(1, 1 << 16) as u32,
            mix: mix | 1,
        }
    }

    /// How many workers.
    pub fn workers(&self) -> usize {
        self.workers as usize
    }

    /// The worker of session `id`: ((hi32 ^ lo32) * mix) >> 16, modulo the workers.
    pub fn worker_of(&self, id: u64) -> usize {
        let x = ((id >> 32) as u32) ^ (id as u32);
        ((x.wrapping_mul(self.mix) >> 16) % self.workers) as usize
    }

    /// The socket of a packet in the group of `2 * workers` sockets: a transport packet
    /// (type byte 0 or 3) goes to its worker's transport socket (`worker_of`), anything
    /// else (handshakes, garbage, packets too short to hold a session id) to its worker's
    /// control socket (`workers + worker_of`; worker 0's when there is no session id).
    pub fn socket_of(&self, payload: &[u8]) -> usize {
        let w = self.workers as usize;
        let Some(id) = payload.get(2..10) else {
            return w;
        };
        let owner = self.worker_of(u64::from_be_bytes(id.try_into().unwrap_or([0; 8])));
        match payload[1] {
            0 | 3 => owner,
            _ => w + owner,
        }
    }

    /// The classic-BPF program computing [`Steering::socket_of`] from a UDP payload (the
    /// type is byte 1, the session id bytes 2..10, big-endian).
    pub fn program(&self) -> Vec<libc::sock_filter> {
        const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
        const LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
        const LD_W_LEN: u16 = 0x80; // BPF_LD | BPF_W | BPF_LEN
        const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
        const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
        const TAX: u16 = 0x07; // BPF_MISC | BPF_TAX
        const XOR_X: u16 = 0x04 | 0xa0 | 0x08; // BPF_ALU | BPF_XOR | BPF_X
        const MUL_K: u16 = 0x04 | 0x20; // BPF_ALU | BPF_MUL | BPF_K
        const RSH_K: u16 = 0x04 | 0x70; // BPF_ALU | BPF_RSH | BPF_K
        const MOD_K: u16 = 0x04 | 0x90; // BPF_ALU | BPF_MOD | BPF_K
        const ADD_K: u16 = 0x04; // BPF_ALU | BPF_ADD | BPF_K
        const RET_A: u16 = 0x06 | 0x10; // BPF_RET | BPF_A
        const RET_K: u16 = 0x06; // BPF_RET | BPF_K
        let op = |code, k| libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        };
        let jump = |code, k, jt, jf| libc::sock_filter { code, jt, jf, k };
        let owner = [
            op(LD_W_ABS, 6), // A = low 32 bits of the session id
            op(TAX, 0),      // X = A
            op(LD_W_ABS, 2), // A = high 32 bits
            op(XOR_X, 0),
            op(MUL_K, self.mix),
            op(RSH_K, 16),
            op(MOD_K, self.workers),
        ];
        let mut p = vec![
            op(LD_W_LEN, 0),
            jump(JGE_K, 10, 1, 0),   // a session id: go on
            op(RET_K, self.workers), // else worker 0's control socket
            op(LD_B_ABS, 1),         // A = the type byte
            jump(JEQ_K, 0, 10, 0),   // transport, key phase 0: to the transport part
            jump(JEQ_K, 3, 9, 0),    // key phase 1: the same
        ];
        // Control: the owner's socket after the transport sockets (8 instructions).
        p.extend(owner);
        p.extend([op(ADD_K, self.workers), op(RET_A, 0)]);
        // Transport: the owner's socket (8 instructions).
        p.extend(owner);
        p.push(op(RET_A, 0));
        p
    }

    /// Attach [`Steering::program`] to the reuseport group of `socket`.
    pub fn attach(&self, socket: &impl AsRawFd) -> io::Result<()> {
        let mut prog = self.program();
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_mut_ptr(),
        };
        // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies it.
        let r = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_REUSEPORT_CBPF,
                (&fprog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// `n` UDP sockets on `addr` in one SO_REUSEPORT group, in worker order (the kernel's
/// index is the order of binding). The first is bound without SO_REUSEPORT and gets it
/// afterwards, so that binding fails as with one socket when the address is taken (even by
/// another braid server of the same user) and an ephemeral port is one nobody else uses.
pub fn bind_group(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    let first = socket(addr, false)?;
    let addr = first
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("the UDP socket has no IP address"))?;
    first.set_reuse_port(true)?;
    let mut all = vec![first];
    for _ in 1..n {
        all.push(socket(addr, true)?);
    }
    Ok(all.into_iter().map(Into::into).collect())
}

fn socket(addr: SocketAddr, reuse_port: bool) -> io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(mark) = crate::udp::socket_mark() {
        sock.set_mark(mark)?;
    }
    let _ = sock.set_recv_buffer_size(crate::udp::SOCKET_BUFFER);
    let _ = sock.set_send_buffer_size(crate::udp::SOCKET_BUFFER);
    sock.set_nonblocking(true)?;
    sock.set_reuse_port(reuse_port)?;
    sock.bind(&addr.into()).map_err(|e| {
        let advice = if e.kind() == io::ErrorKind::AddrInUse {
            format!(
                "; UDP port {} is already served there (another braid server, or another \
                 program): stop it, or give this server another --listen port",
                addr.port()
            )
        } else {
            String::new()
        };
        io::Error::new(
            e.kind(),
            format!("cannot bind UDP socket to {addr}: {e}{advice}"),
        )
    })?;
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_spread_over_workers_and_one_worker_takes_all() {
        let s = Steering::new(4, 0x9e37_79b9);
        let mut n = [0usize; 4];
        let mut x = 1u64;
        for _ in 0..4000 {
            x = braid_core::rng::splitmix64(x);
            n[s.worker_of(x)] += 1;
        }
        assert!(n.iter().all(|&c| (800..1200).contains(&c)), "{n:?}");
        let one = Steering::new(1, 7);
        assert!((0..100u64).all(|i| one.worker_of(i << 40 | i) == 0));
    }

    #[test]
    fn the_mix_moves_sessions_between_workers() {
        // Ids an agent chose to share a worker under one multiplier spread under another.
        let a = Steering::new(2, 0x1234_5679);
        let b = Steering::new(2, 0x8765_4321);
        let same: Vec<u64> = (0..10_000u64).filter(|&i| a.worker_of(i) == 0).collect();
        let moved = same.iter().filter(|&&i| b.worker_of(i) == 1).count();
        assert!(moved > same.len() / 3, "{moved} of {}", same.len());
    }

    #[test]
    fn the_group_takes_a_taken_port_never() {
        let g = bind_group("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = g[0].local_addr().unwrap();
        assert_eq!(g[1].local_addr().unwrap(), addr);
        // A second server on the same address fails as with one socket, naming the port.
        let e = bind_group(addr, 2).unwrap_err().to_string();
        let port = format!("UDP port {} is already served", addr.port());
        assert!(e.contains(&port) && e.contains("--listen"), "{e}");
        assert!(std::net::UdpSocket::bind(addr).is_err());
    }
}

#[cfg(test)]
mod kernel_tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The BPF program and `socket_of` agree: every session's transport packets (type 0 or
    /// 3) arrive on its worker's transport socket, its other packets (a handshake, a
    /// cookie-type packet, any other type byte) on its worker's control socket, and a
    /// datagram too short for a session id on worker 0's control socket (skipped, loudly,
    /// where the kernel refuses the program).
    #[test]
    fn the_kernel_steers_each_session_to_its_worker_and_control_apart() {
        let s = Steering::new(3, 0x2545_f491);
        let g = bind_group("127.0.0.1:0".parse().unwrap(), 6).unwrap();
        if let Err(e) = s.attach(&g[0]) {
            eprintln!("SKIPPED: this kernel refuses SO_ATTACH_REUSEPORT_CBPF: {e}");
            return;
        }
        let to = g[0].local_addr().unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut want = [0usize; 6];
        let mut id = 7u64;
        let mut sent = 0;
        for i in 0..120u8 {
            id = braid_core::rng::splitmix64(id);
            let mut p = vec![1u8, [0, 1, 2, 3, 0x5a][i as usize % 5]];
            p.extend_from_slice(&id.to_be_bytes());
            p.extend_from_slice(&[0; 20]);
            if i % 17 == 0 {
                p.truncate(9);
            }
            tx.send_to(&p, to).unwrap();
            want[s.socket_of(&p)] += 1;
            sent += 1;
        }
        assert!(want[..3].iter().all(|&n| n > 0) && want[3..].iter().all(|&n| n > 0));
        let mut got = [0usize; 6];
        let mut buf = [0u8; 64];
        let until = Instant::now() + Duration::from_secs(2);
        while got.iter().sum::<usize>() < sent && Instant::now() < until {
            for (k, sock) in g.iter().enumerate() {
                while let Ok(n) = sock.recv(&mut buf) {
                    assert_eq!(
                        s.socket_of(&buf[..n]),
                        k,
                        "{:02x?} on socket {k}",
                        &buf[..n]
                    );
                    got[k] += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(got, want);
    }
}
