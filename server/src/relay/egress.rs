//! Egress safety: partner URLs must not reach into our own network.
//!
//! A partner URL that resolves to a loopback, private, link-local or similar
//! address is refused at registration and again at every delivery, because a
//! name that was public yesterday can resolve to 127.0.0.1 today. The check
//! at delivery sits in the HTTP client's resolver, so the address we vet is
//! the address we connect to (no gap for DNS to change in between); URLs with
//! a literal IP never reach a resolver and are checked by `vet_target`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// True for addresses a partner endpoint may not be: our loopback, private
/// and link-local ranges, CGNAT, unspecified, multicast, broadcast — and the
/// same ranges reached through an IPv6 address that carries an IPv4 one
/// (see `embedded_v4`), which a NAT64 gateway or a 6to4/Teredo relay
/// would route to that IPv4 address.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80
            // link-local fe80::/10
            {
                return true;
            }
            match embedded_v4(v6) {
                Embedded::None => false,
                Embedded::LocalUse => true,
                Embedded::One(v4) => is_internal_v4(v4),
                Embedded::Two(a, b) => is_internal_v4(a) || is_internal_v4(b),
            }
        }
    }
}

/// IPv4 addresses an IPv6 address carries.
#[derive(Debug, PartialEq, Eq)]
enum Embedded {
    None,
    One(Ipv4Addr),
    /// Teredo carries two: the Teredo server and the client's (obfuscated).
    Two(Ipv4Addr, Ipv4Addr),
    /// The local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215): where it embeds
    /// the IPv4 address depends on the operator's prefix length, and it is
    /// never a public destination anyway, so the whole prefix is refused.
    LocalUse,
}

fn embedded_v4(v6: Ipv6Addr) -> Embedded {
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d (the
        // deprecated form; :: and ::1 are caught before this).
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0, 0, hi, lo] => Embedded::One(v4(hi, lo)),
        // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052).
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Embedded::One(v4(hi, lo)),
        [0x64, 0xff9b, 1, ..] => Embedded::LocalUse,
        // 6to4 2002:AABB:CCDD::/48 (RFC 3056): the IPv4 address is bits 16..48.
        [0x2002, hi, lo, ..] => Embedded::One(v4(hi, lo)),
        // Teredo 2001:0::/32 (RFC 4380): the server's IPv4 in bits 32..64,
        // the client's in the last 32 bits, inverted.
        [0x2001, 0, server_hi, server_lo, _, _, client_hi, client_lo] => {
            Embedded::Two(v4(server_hi, server_lo), v4(!client_hi, !client_lo))
        }
        _ => Embedded::None,
    }
}

fn is_internal_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
        || a == 0
}

/// Why a URL may not be a partner endpoint.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("not an http(s) URL: {0}")]
    BadUrl(String),
    #[error("{host} resolves to {addr}, an internal address; partner endpoints must be public (or start the server with --relay-allow-private-targets)")]
    Internal { host: String, addr: IpAddr },
    #[error("cannot resolve {host}: {message}")]
    Unresolvable { host: String, message: String },
}

/// Parses and vets a partner URL (resolving its host): registration's
/// check, which answers with what the name resolves to now.
pub async fn check_url(url: &str, allow_private: bool) -> Result<Url, EgressError> {
    let parsed = parse_target(url)?;
    if allow_private {
        return Ok(parsed);
    }
    let host = parsed
        .host_str()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_owned();
    let port = parsed.port_or_known_default().unwrap_or(443);
    let addrs = resolve(&host, port).await?;
    if let Some(bad) = addrs.iter().find(|a| is_internal(a.ip())) {
        return Err(EgressError::Internal {
            host,
            addr: bad.ip(),
        });
    }
    Ok(parsed)
}

/// Parses a partner URL and vets what can be vetted without a lookup: an
/// http(s) URL with a host, whose host, if a literal IP address, is not
/// internal. This is the check at delivery: a host name is vetted by
/// [`SafeResolver`] when a connection is made, against the address
/// connected to, so resolving it here as well would only cost a lookup on
/// a blocking thread per delivery.
pub fn vet_target(url: &str, allow_private: bool) -> Result<Url, EgressError> {
    let parsed = parse_target(url)?;
    let literal = match parsed.host() {
        Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
        Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
        _ => None,
    };
    match literal {
        Some(addr) if !allow_private && is_internal(addr) => Err(EgressError::Internal {
            host: parsed.host_str().unwrap_or_default().to_owned(),
            addr,
        }),
        _ => Ok(parsed),
    }
}

fn parse_target(url: &str) -> Result<Url, EgressError> {
    let parsed = Url::parse(url).map_err(|e| EgressError::BadUrl(format!("{url}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(EgressError::BadUrl(url.to_owned()));
    }
    Ok(parsed)
}

async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, EgressError> {
    let target = format!("{host}:{port}");
    let host_owned = host.to_owned();
    tokio::task::spawn_blocking(move || target.to_socket_addrs().map(|a| a.collect::<Vec<_>>()))
        .await
        .map_err(|e| EgressError::Unresolvable {
            host: host_owned.clone(),
            message: e.to_string(),
        })?
        .map_err(|e| EgressError::Unresolvable {
            host: host_owned,
            message: e.to_string(),
        })
}

/// The relay's DNS resolver: resolves, then refuses internal addresses unless
/// the operator allowed them.
#[derive(Debug, Clone, Copy)]
pub struct SafeResolver {
    pub allow_private: bool,
}

impl Resolve for SafeResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = resolve(&host, 0).await?;
            let allowed: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| allow_private || !is_internal(a.ip()))
                .collect();
            if allowed.is_empty() {
                let addr = addrs
                    .first()
                    .map(|a| a.ip())
                    .unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
                return Err(Box::new(EgressError::Internal { host, addr })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ranges_are_refused() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(
                is_internal(ip.parse().expect("ip")),
                "{ip} should be internal"
            );
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(
                !is_internal(ip.parse().expect("ip")),
                "{ip} should be public"
            );
        }
    }

    /// Before: each of these passed as a public address, and a NAT64
    /// gateway or 6to4/Teredo relay would carry the delivery to the IPv4
    /// address inside.
    #[test]
    fn ipv4_addresses_inside_ipv6_ones_get_the_same_rules() {
        for ip in [
            "::127.0.0.1",               // IPv4-compatible
            "::10.0.0.1",                //
            "64:ff9b::127.0.0.1",        // NAT64
            "64:ff9b::a9fe:a9fe",        // NAT64 of 169.254.169.254 (cloud metadata)
            "64:ff9b:1::8.8.8.8",        // local-use NAT64: refused whole
            "64:ff9b:1:ab::1",           //
            "2002:7f00:1::1",            // 6to4 of 127.0.0.1
            "2002:c0a8:101::1",          // 6to4 of 192.168.1.1
            "2001:0:0a00:1::1",          // Teredo, server 10.0.0.1
            "2001:0:808:808::80ff:fffe", // Teredo, client !(7f00:0001) = 127.0.0.1
        ] {
            assert!(
                is_internal(ip.parse().expect("ip")),
                "{ip} should be internal"
            );
        }
        for ip in [
            "::8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "2001:0:808:808::f7f7:f7f7", // Teredo, server and client 8.8.8.8
        ] {
            assert!(
                !is_internal(ip.parse().expect("ip")),
                "{ip} should be public"
            );
        }
    }

    #[tokio::test]
    async fn registration_check_refuses_embedded_internal_addresses() {
        for url in [
            "http://[64:ff9b::7f00:1]:9/hook",
            "http://[2002:c0a8:101::1]/hook",
            "http://[::127.0.0.1]/",
        ] {
            let err = check_url(url, false).await.expect_err(url);
            assert!(matches!(err, EgressError::Internal { .. }), "{url}: {err}");
        }
    }

    #[test]
    fn the_check_at_delivery_refuses_internal_literals_and_leaves_names_to_the_resolver() {
        for url in [
            "http://127.0.0.1:9/hook",
            "http://[::1]:9/hook",
            "http://[64:ff9b::a9fe:a9fe]/latest",
        ] {
            let err = vet_target(url, false).expect_err(url);
            assert!(matches!(err, EgressError::Internal { .. }), "{url}: {err}");
            assert!(
                vet_target(url, true).is_ok(),
                "{url} is allowed when private targets are"
            );
        }
        assert!(matches!(
            vet_target("ftp://example.com/", true),
            Err(EgressError::BadUrl(_))
        ));
        // No lookup here: the name is vetted when a connection is made.
        assert!(vet_target("http://localhost:9/hook", false).is_ok());
    }

    /// What lets the check at delivery skip host names: the relay's client
    /// refuses one that resolves to an internal address before connecting.
    #[tokio::test]
    async fn the_relays_client_refuses_a_name_that_resolves_to_an_internal_address() {
        let client = crate::relay::deliver::client(std::time::Duration::from_secs(5), false)
            .expect("client");
        let err = client
            .post("http://localhost:9/hook")
            .send()
            .await
            .expect_err("refused");
        let chain = crate::relay::deliver::error_chain(&err);
        assert!(chain.contains("an internal address"), "{chain}");
    }

    #[tokio::test]
    async fn registration_check_refuses_loopback_urls() {
        let err = check_url("http://127.0.0.1:9/hook", false)
            .await
            .expect_err("loopback");
        assert!(matches!(err, EgressError::Internal { .. }), "{err}");
        let err = check_url("http://localhost:9/hook", false)
            .await
            .expect_err("localhost");
        assert!(matches!(err, EgressError::Internal { .. }), "{err}");
        assert!(check_url("http://127.0.0.1:9/hook", true).await.is_ok());
        assert!(matches!(
            check_url("ftp://example.com/", false).await,
            Err(EgressError::BadUrl(_))
        ));
    }
}
