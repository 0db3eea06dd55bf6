//! Egress safety: partner URLs must not reach into our own network.
//!
//! A partner URL that resolves to a loopback, private, link-local or similar
//! address is refused at registration and again at every delivery, because a
//! name that was public yesterday can resolve to 127.0.0.1 today. The check
//! at delivery sits in the HTTP client's resolver, so the address we vet is
//! the address we connect to (no gap for DNS to change in between); URLs with
//! a literal IP never reach a resolver and are checked by `check_url`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// True for addresses a partner endpoint may not be: our loopback, private
/// and link-local ranges, CGNAT, unspecified, multicast, broadcast.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
        }
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

/// Parses and vets a partner URL (resolving its host).
pub async fn check_url(url: &str, allow_private: bool) -> Result<Url, EgressError> {
    let parsed = Url::parse(url).map_err(|e| EgressError::BadUrl(format!("{url}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(EgressError::BadUrl(url.to_owned()));
    }
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
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(
                !is_internal(ip.parse().expect("ip")),
                "{ip} should be public"
            );
        }
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
