//! The accept loop's bounds over real TCP (issue 15 item 6): a connection
//! that never finishes its request head is closed, so is a kept-alive one
//! that sends nothing more, a declared Content-Length past the limit is a
//! 413 before any body is sent, and past the connection cap a client waits
//! until a connection frees up.

use std::time::Duration;

use holdfast_server::http::serve::ConnectionLimits;
use holdfast_server::AppState;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{TestServer, MIGRATIONS};

/// Deadlines for things that must happen: generous for a loaded machine,
/// and each far below "for ever", which is what happened before.
const DEADLINE: Duration = Duration::from_secs(30);

async fn start(db: PgPool, limits: ConnectionLimits) -> (TestServer, String) {
    let s = TestServer::start_with(AppState::new(db).with_connection_limits(limits)).await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    (s, addr)
}

/// Reads until the server closes the connection; what it sent before.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut all = Vec::new();
    let read = tokio::time::timeout(DEADLINE, stream.read_to_end(&mut all)).await;
    assert!(
        read.is_ok(),
        "the server never closed the connection; it sent {:?}",
        String::from_utf8_lossy(&all)
    );
    String::from_utf8_lossy(&all).into_owned()
}

/// Reads one response head (up to the blank line).
async fn response_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(DEADLINE, async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.expect("read") == 0 {
                break;
            }
            head.push(byte[0]);
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "no answer; got {:?}",
        String::from_utf8_lossy(&head)
    );
    String::from_utf8_lossy(&head).into_owned()
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn slow_or_idle_connections_are_closed(db: PgPool) {
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    let (_s, addr) = start(db, limits).await;

    // Half a request head, then nothing.
    let mut slow = TcpStream::connect(&addr).await.expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let sent = until_closed(&mut slow).await;
    assert!(
        !sent.contains("200 OK"),
        "never answered as if complete: {sent}"
    );

    // A whole request kept alive, then nothing more.
    let mut idle = TcpStream::connect(&addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let head = response_head(&mut idle).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    until_closed(&mut idle).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_declared_body_past_the_limit_is_refused_before_it_is_sent(db: PgPool) {
    let (s, addr) = start(db, ConnectionLimits::default()).await;
    let token = s.login("acme", "dana@acme.test").await;
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    let head = format!(
        "POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nIdempotency-Key: big-1\r\n\
         Content-Type: application/json\r\nContent-Length: 5368709120\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    // Not a byte of the 5 GiB is sent: the answer must come from the header.
    let answer = response_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("application/problem+json"),
        "{answer}"
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn past_the_connection_cap_a_client_waits_for_a_free_connection(db: PgPool) {
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(60),
        max_connections: 2,
    };
    let (_s, addr) = start(db, limits).await;
    let first = TcpStream::connect(&addr).await.expect("connect");
    let mut second = TcpStream::connect(&addr).await.expect("connect");
    // The second is served (so both are accepted and counted).
    second
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    assert!(response_head(&mut second).await.starts_with("HTTP/1.1 200"));

    let mut third = TcpStream::connect(&addr)
        .await
        .expect("the kernel queues it");
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut byte)).await;
    assert!(early.is_err(), "served past the cap of 2");

    drop(first);
    let head = response_head(&mut third).await;
    assert!(
        head.starts_with("TTP/1.1 200") || head.starts_with("HTTP/1.1 200"),
        "served once a connection freed up: {head}"
    );
}
