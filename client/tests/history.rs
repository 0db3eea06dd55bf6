//! The order's history on the desk (API.md v1.1) against the real server: an
//! online-only read that names each version's author and the very key the
//! desk minted for the act, says so when the order has not been sent yet, and
//! fails as offline (not as a bug) when the server cannot be reached.

mod support;

use holdfast_client::store::pending;
use holdfast_client::{Error, NewOrder};
use sqlx::PgPool;
use support::*;

#[sqlx::test(migrations = "../migrations")]
async fn the_desk_reads_the_servers_history_online_only(db: PgPool) {
    let mut server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(dir.path(), "dana", fast_config());
    login(&desk, &server.url(), "dana@acme.test").await;

    let order = desk
        .create_order(NewOrder {
            customer_id: tokyo(),
            ..Default::default()
        })
        .expect("create");
    let line = desk.add_line(order, kestrel_m(), 2).expect("line");
    desk.allocate(order, line, 1).expect("allocate");
    let keys: Vec<String> = desk
        .store()
        .read(|tx| pending::for_order(tx, order))
        .expect("queue")
        .into_iter()
        .map(|row| row.key)
        .collect();
    assert_eq!(keys.len(), 3);

    // Queued only: the server has no such order yet, and the desk says why.
    match desk.order_history(order).await {
        Err(Error::NotFound(why)) => assert!(why.contains("not reached the server"), "{why}"),
        other => panic!("expected not found, got {other:?}"),
    }

    desk.sync_once().await.expect("sync");
    let history = desk.order_history(order).await.expect("history");
    let got: Vec<(i64, &str, Option<&str>, Option<&str>)> = history
        .entries
        .iter()
        .map(|e| {
            (
                e.version,
                e.event_type.as_str(),
                e.by_name.as_deref(),
                e.idempotency_key.as_deref(),
            )
        })
        .collect();
    let dana = Some("Dana Whitfield");
    assert_eq!(
        got,
        vec![
            (1, "order.created", dana, Some(keys[0].as_str())),
            (2, "order.updated", dana, Some(keys[1].as_str())),
            (3, "order.line_allocated", dana, Some(keys[2].as_str())),
        ]
    );

    // Unreachable: an offline error with words for it, not a crash.
    server.stop().await;
    let err = desk
        .order_history(order)
        .await
        .expect_err("the server is down");
    assert!(matches!(err, Error::OnlineOnly { .. }), "{err:?}");
    assert!(err.is_offline());
    assert!(err.to_string().contains("try again when online"), "{err}");
}
