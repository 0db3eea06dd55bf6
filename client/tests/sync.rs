//! The sync loop against the real server over real HTTP: a plain round trip,
//! 200 acts made while the server is down, and a storm of lost responses and
//! resets from a fault-injecting proxy.

mod support;

use holdfast_client::act::{Act, WireRequest};
use holdfast_client::store::pending;
use holdfast_client::{EngineEvent, Error, SyncConfig};
use holdfast_protocol::model::OrderHeaderSet;
use rand::rngs::StdRng;
use rand::SeedableRng;
use sqlx::PgPool;
use support::proxy::{Faults, Proxy};
use support::*;
use tokio::sync::broadcast;

/// Waits for the first event `pick` accepts, failing at the deadline.
async fn wait_for<T>(
    events: &mut broadcast::Receiver<EngineEvent>,
    mut pick: impl FnMut(&EngineEvent) -> Option<T>,
) -> T {
    tokio::time::timeout(DEADLINE, async {
        loop {
            match events.recv().await {
                Ok(e) => {
                    if let Some(t) = pick(&e) {
                        return t;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("event stream ended: {e}"),
            }
        }
    })
    .await
    .expect("the event came before the deadline")
}

#[sqlx::test(migrations = "../migrations")]
async fn acts_land_at_once_and_reach_the_server(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(dir.path(), "dana", fast_config());
    login(&desk, &server.url(), "dana@acme.test").await;
    let token = server.token("priya@acme.test").await;
    assert_eq!(desk.status().expect("status").online, Some(true));
    assert!(desk.customers().expect("customers").len() >= 2, "pulled");

    let order = desk
        .create_order(holdfast_client::NewOrder {
            customer_id: austin(),
            customer_po: Some("PO-1".into()),
            ..Default::default()
        })
        .expect("create");
    let line = desk.add_line(order, kestrel_m(), 3).expect("line");
    desk.allocate(order, line, 2).expect("allocate");
    desk.edit_order(
        order,
        OrderHeaderSet {
            notes: Some(Some("call before delivery".into())),
            ..Default::default()
        },
    )
    .expect("edit");

    // Local at once: the view shows every act, marked pending, and the ATS
    // the desk can still promise.
    let view = desk.order(order).expect("view").expect("local order");
    assert_eq!(view.server_version, None);
    assert_eq!(view.order.version, 4);
    assert_eq!(view.pending.len(), 4);
    assert_eq!(view.order.lines[0].qty_allocated, 2);
    assert!(view.pending_fields.contains(&"notes".to_owned()));
    let sku = desk.sku(kestrel_m()).expect("sku").expect("mirrored");
    assert_eq!((sku.sku.ats, sku.ats_local), (6, 4));
    let rows = desk.pending_rows().expect("rows");
    let bases: Vec<i64> = rows.iter().map(|r| r.base_version).collect();
    assert_eq!(bases, [0, 1, 2, 3], "each act chains on the previous one");

    let report = desk.sync_once().await.expect("sync");
    assert_eq!(report.applied, 4);
    let server_doc = server.order(&token, order).await;
    let view = desk.order(order).expect("view").expect("order");
    assert!(view.pending.is_empty());
    assert_eq!(view.order, server_doc, "local = server");
    assert_eq!(server_doc.version, 4);
    assert_eq!(server.sku(&token, kestrel_m()).await.ats, 4);
    assert_eq!(desk.status().expect("status").pending, 0);
}

/// A row queued by an older app (envelope schema 1: the request alone) is
/// upcast on read and still lands after the upgrade.
#[sqlx::test(migrations = "../migrations")]
async fn a_row_queued_by_an_older_app_still_applies(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(dir.path(), "dana", fast_config());
    login(&desk, &server.url(), "dana@acme.test").await;
    let order = desk
        .create_order(holdfast_client::NewOrder {
            customer_id: tokyo(),
            ..Default::default()
        })
        .expect("create");
    desk.sync_once().await.expect("sync");
    let request = WireRequest {
        method: "PATCH".into(),
        path: format!("/v1/orders/{order}"),
        body: serde_json::json!({"base_version": 1, "set": {"notes": "from the old app"}}),
    };
    desk.store()
        .write(|tx| {
            pending::insert_raw_v1(tx, "old-app-key-1", &request, order, 1, 0)?;
            Ok(())
        })
        .expect("old row");
    let rows = desk.pending_rows().expect("rows");
    assert!(matches!(rows[0].act, Act::PatchOrder { .. }), "upcast");
    let view = desk.order(order).expect("view").expect("order");
    assert_eq!(view.order.notes.as_deref(), Some("from the old app"));
    desk.sync_once().await.expect("sync");
    let token = server.token("dana@acme.test").await;
    assert_eq!(
        server.order(&token, order).await.notes.as_deref(),
        Some("from the old app")
    );
}

/// Two processes on one store never sync at once: the second is told so.
#[sqlx::test(migrations = "../migrations")]
async fn one_sync_at_a_time_per_store(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = std::sync::Arc::new(holdfast_client::token::MemoryTokens::default());
    let desk = open_with(dir.path(), "dana", fast_config(), tokens.clone());
    login(&desk, &server.url(), "dana@acme.test").await;
    let held = desk.store().try_sync_lock().expect("lock").expect("free");
    let other = open_with(dir.path(), "dana", fast_config(), tokens);
    assert!(matches!(other.sync_once().await, Err(Error::Busy)));
    drop(held);
    other.sync_once().await.expect("now free");
}

/// Must show: 200 acts made while the server is down (several orders, edits,
/// allocations) all land exactly once when it comes back, in per-order order,
/// and the desk then shows exactly the server's documents. The desk's loop
/// runs throughout with a ten-minute backoff, so only noticing that the
/// network is back (the stream reconnecting) can explain the catch-up.
#[sqlx::test(migrations = "../migrations")]
async fn offline_then_online_200_acts_land_exactly_once_in_order(db: PgPool) {
    let mut server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = SyncConfig {
        backoff_base_ms: 600_000,
        backoff_cap_ms: 600_000,
        stream_retry_base_ms: 20,
        stream_retry_cap_ms: 200,
        ..fast_config()
    };
    let desk = open(dir.path(), "dana", config);
    login(&desk, &server.url(), "dana@acme.test").await;
    let skus = roomy_skus(&desk, 30, 12);

    server.stop().await;
    let mut events = desk.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let desk = desk.clone();
        async move {
            desk.run(async {
                let _ = stopped.await;
            })
            .await
        }
    });
    // The open desk notices the server is gone.
    wait_for(&mut events, |e| match e {
        EngineEvent::SyncFailed { offline: true, .. } => Some(()),
        _ => None,
    })
    .await;

    let mut rng = StdRng::seed_from_u64(200);
    let ledger = random_acts(&desk, &mut rng, 8, 200, &skus);
    assert_eq!(ledger.total(), 200);
    let status = desk.status().expect("status");
    assert_eq!(status.pending, 200, "all 200 kept locally");
    assert_eq!(status.online, Some(false));
    assert!(status.next_attempt_at.is_some(), "backing off");

    server.restart().await;
    wait_for(&mut events, |e| match e {
        EngineEvent::SyncFinished(_) if desk.status().expect("status").pending == 0 => Some(()),
        _ => None,
    })
    .await;
    let _ = stop.send(());
    running.await.expect("join").expect("run");

    let token = server.token("priya@acme.test").await;
    ledger.check_exactly_once(&server, &token).await;
    ledger
        .check_local_equals_server(&desk, &server, &token)
        .await;
    let status = desk.status().expect("status");
    assert_eq!((status.conflicts, status.rejections), (0, 0));
    assert_eq!(status.online, Some(true));
}

/// Must show: a proxy that drops a share of responses after the server ran
/// them, cuts bodies and resets connections; after the storm every act was
/// applied exactly once (ledger, versions, events) and the desk matches.
#[sqlx::test(migrations = "../migrations")]
async fn lost_responses_and_resets_never_double_an_act(db: PgPool) {
    let server = Server::start(db).await;
    let proxy = Proxy::start(server.addr, 0x5eed).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(
        dir.path(),
        "dana",
        SyncConfig {
            batch_size: 4,
            ..fast_config()
        },
    );
    login(&desk, &proxy.url(), "dana@acme.test").await;
    let skus = roomy_skus(&desk, 30, 8);
    let mut rng = StdRng::seed_from_u64(17);
    let ledger = random_acts(&desk, &mut rng, 6, 90, &skus);

    proxy.set_faults(Faults {
        drop_response: 0.3,
        cut_body: 0.15,
        refuse: 0.1,
    });
    let (failed, replayed) = sync_until_settled(&desk, 500).await;
    proxy.set_faults(Faults::default());
    desk.sync_once().await.expect("calm sync");

    use std::sync::atomic::Ordering::Relaxed;
    let stats = proxy.stats();
    assert!(failed > 0, "the storm failed some passes");
    assert!(stats.dropped.load(Relaxed) > 0, "responses were dropped");
    assert!(stats.cut.load(Relaxed) > 0, "bodies were cut");
    assert!(
        replayed > 0,
        "lost answers came back as replays, not re-runs"
    );

    let token = server.token("priya@acme.test").await;
    ledger.check_exactly_once(&server, &token).await;
    ledger
        .check_local_equals_server(&desk, &server, &token)
        .await;
}

/// The stream pokes an open desk: a colleague's change arrives without
/// anyone pressing sync (the loop's own fallback poll is ten minutes away).
#[sqlx::test(migrations = "../migrations")]
async fn a_stream_poke_brings_a_colleagues_change(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dana = open(
        dir.path(),
        "dana",
        SyncConfig {
            poll_interval: std::time::Duration::from_secs(600),
            ..fast_config()
        },
    );
    let priya = open(dir.path(), "priya", fast_config());
    login(&dana, &server.url(), "dana@acme.test").await;
    login(&priya, &server.url(), "priya@acme.test").await;
    let mut pokes = server.pokes(&server.token("priya@acme.test").await).await;
    let x = dana
        .create_order(holdfast_client::NewOrder {
            customer_id: tokyo(),
            ..Default::default()
        })
        .expect("create");
    dana.sync_once().await.expect("sync");
    pull_until(&priya, &mut pokes, |p| mirrored_version(p, x) == 1).await;

    let mut events = dana.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let dana = dana.clone();
        async move {
            dana.run(async {
                let _ = stopped.await;
            })
            .await
        }
    });
    wait_for(&mut events, |e| {
        matches!(e, EngineEvent::StreamConnected).then_some(())
    })
    .await;

    priya
        .edit_order(
            x,
            OrderHeaderSet {
                notes: Some(Some("from priya".into())),
                ..Default::default()
            },
        )
        .expect("edit");
    priya.sync_once().await.expect("priya syncs");
    wait_for(&mut events, |e| {
        let arrived = dana
            .server_order(x)
            .expect("mirror")
            .is_some_and(|o| o.notes.as_deref() == Some("from priya"));
        (matches!(e, EngineEvent::SyncFinished(_)) && arrived).then_some(())
    })
    .await;
    let _ = stop.send(());
    running.await.expect("join").expect("run");
}

/// Issue 14: an idle desk (nothing to push, no pass due for ten minutes)
/// goes offline when the server goes away — only the lost stream can tell it
/// — and online again once the server answers; the raw error is kept for the
/// details view, not lost.
#[sqlx::test(migrations = "../migrations")]
async fn an_idle_desk_goes_offline_when_the_server_does_and_back(db: PgPool) {
    let mut server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = SyncConfig {
        poll_interval: std::time::Duration::from_secs(600),
        stream_retry_base_ms: 20,
        stream_retry_cap_ms: 200,
        ..fast_config()
    };
    let desk = open(dir.path(), "dana", config);
    login(&desk, &server.url(), "dana@acme.test").await;
    let mut events = desk.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let desk = desk.clone();
        async move {
            desk.run(async {
                let _ = stopped.await;
            })
            .await
        }
    });
    wait_for(&mut events, |e| {
        matches!(e, EngineEvent::StreamConnected).then_some(())
    })
    .await;
    assert_eq!(desk.status().expect("status").online, Some(true));

    server.stop().await;
    wait_for(&mut events, |e| {
        matches!(e, EngineEvent::StreamLost { .. }).then_some(())
    })
    .await;
    let status = desk.status().expect("status");
    assert_eq!(status.pending, 0, "nothing was pushed or due");
    assert_eq!(status.online, Some(false), "the lost stream says offline");
    assert!(
        status.last_error.is_some(),
        "the raw error is kept for details"
    );

    // Back: the stream reconnects and the pass it starts finishes. (A pass
    // that finishes before the stream is back may still say offline: a
    // stream attempt refused after its last answer is the newer news.)
    server.restart().await;
    wait_for(&mut events, |e| {
        matches!(e, EngineEvent::StreamConnected).then_some(())
    })
    .await;
    wait_for(&mut events, |e| {
        matches!(e, EngineEvent::SyncFinished(_)).then_some(())
    })
    .await;
    let status = desk.status().expect("status");
    assert_eq!(status.online, Some(true));
    assert_eq!(status.last_error, None);
    let _ = stop.send(());
    running.await.expect("join").expect("run");
}
