//! Address ranges: which peers are trusted proxies, whose forwarding claims
//! ([`crate::is_forwarding_claim`]) a proxy believes (serve's `trusted_proxies`, the
//! shadow proxy's `--trusted-proxy`).

use std::fmt;
use std::net::IpAddr;

/// An address range: `127.0.0.1/32`, `10.0.0.0/8`, `::1/128`; a bare address is one host.
///
/// ```
/// use scalpel_http::IpNet;
/// let net = IpNet::parse("10.0.0.0/8").unwrap();
/// assert!(net.contains("10.1.2.3".parse().unwrap()));
/// assert!(net.contains("::ffff:10.1.2.3".parse().unwrap()));
/// assert!(!net.contains("11.0.0.1".parse().unwrap()));
/// assert!(IpNet::parse("10.0.0.0/33").is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Reads `ADDR` or `ADDR/BITS`; `None` when it is neither.
    pub fn parse(text: &str) -> Option<Self> {
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
    pub fn contains(&self, ip: IpAddr) -> bool {
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

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_their_addresses_and_nothing_else() {
        let v4 = IpNet::parse(" 192.168.0.0/16 ").unwrap();
        assert!(v4.contains("192.168.255.1".parse().unwrap()));
        assert!(!v4.contains("192.169.0.1".parse().unwrap()));
        assert!(!v4.contains("::1".parse().unwrap()));
        let all = IpNet::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let one = IpNet::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("::2".parse().unwrap()));
        assert_eq!(one.to_string(), "::1/128");
        let v6 = IpNet::parse("::/0").unwrap();
        assert!(v6.contains("2001:db8::1".parse().unwrap()));
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/x",
            "10.0.0/8",
            "::1/129",
            "a.example",
        ] {
            assert!(IpNet::parse(bad).is_none(), "{bad}");
        }
    }
}
