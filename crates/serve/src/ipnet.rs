//! Address ranges (`trusted_proxies`): whose forwarding headers are believed, and which
//! `X-Forwarded-For` entries a sticky `ip` key passes over.

use std::net::IpAddr;

/// An address range: `127.0.0.1/32`, `10.0.0.0/8`, `::1/128`; a bare address is one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (a, p) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.trim(), None),
        };
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) if p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty() => p.parse().ok()?,
            Some(_) => return None,
            None => max,
        };
        (prefix <= max).then_some(Self { addr, prefix })
    }

    /// Is `ip` inside the range? An IPv4 peer seen as `::ffff:a.b.c.d` (a dual-stack
    /// listener) is compared as IPv4.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        let bits = |a: IpAddr| -> (u128, u32) {
            match a {
                IpAddr::V4(v) => (u128::from(u32::from(v)), 32),
                IpAddr::V6(v) => (u128::from(v), 128),
            }
        };
        let ((net, width), (host, host_width)) = (bits(self.addr), bits(ip));
        if width != host_width {
            return false;
        }
        let shift = width - u32::from(self.prefix);
        if shift >= 128 {
            return true;
        }
        (net >> shift) == (host >> shift)
    }
}
