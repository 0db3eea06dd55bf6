//! A desk whose user an administrator deactivates or whose password is
//! reset, against the real server: its next request answers 401, the desk
//! signs itself out with the reason (no crash, no spinning loop), keeps every
//! queued act, and sends them once the same user signs in again.

mod support;

use std::sync::Arc;
use std::time::Duration;

use holdfast_client::token::{MemoryTokens, TokenStore};
use holdfast_client::{EngineEvent, Error, NewOrder};
use holdfast_protocol::model::OrderHeaderSet;
use sqlx::PgPool;
use support::*;

fn store_id(desk: &holdfast_client::Engine) -> String {
    desk.store()
        .read(holdfast_client::store::sync_state::get)
        .expect("state")
        .store_id
}

#[sqlx::test(migrations = "../migrations")]
async fn deactivation_signs_the_desk_out_keeps_its_queue_and_a_new_sign_in_sends_it(db: PgPool) {
    let server = Server::start(db).await;
    let admin = Admin::new(&server).await;
    let email = "new.manager@acme.test";
    let (user, password) = admin.create_user(email, "New Manager").await;

    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = Arc::new(MemoryTokens::default());
    let desk = open_with(dir.path(), "new", fast_config(), tokens.clone());
    desk.login(&server.url(), "acme", email, &password, "test desk", false)
        .await
        .expect("the created user signs in with the one-time password");
    let mut events = desk.subscribe();
    let running = tokio::spawn({
        let desk = desk.clone();
        async move { desk.run(std::future::pending::<()>()).await }
    });
    tokio::time::timeout(DEADLINE, async {
        while desk.status().expect("status").last_synced_at.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("first sync");

    // The operator deactivates the user; the desk's next request is a 401.
    admin.set_user_active(user, false).await;
    let order = desk
        .create_order(NewOrder {
            customer_id: tokyo(),
            customer_po: Some("PO-REVOKED".into()),
            ..Default::default()
        })
        .expect("queued");
    desk.add_line(order, kestrel_m(), 1).expect("queued");
    let reason = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Ok(EngineEvent::SignedOut { reason }) = events.recv().await {
                return reason;
            }
        }
    })
    .await
    .expect("the desk says it was signed out");
    assert_eq!(reason, "Signed out by an administrator.");
    // The loop stops instead of retrying a dead token.
    let stopped = tokio::time::timeout(DEADLINE, running)
        .await
        .expect("the sync loop ends, it does not spin")
        .expect("join");
    assert!(matches!(stopped, Err(Error::Unauthorized)), "{stopped:?}");

    let status = desk.status().expect("status");
    assert!(status.signed_in.is_none(), "signed out");
    let out = status.signed_out.expect("who was signed in, and why");
    assert_eq!(
        out.reason.as_deref(),
        Some("Signed out by an administrator.")
    );
    assert_eq!(
        (out.tenant_slug.as_str(), out.user_email.as_str()),
        ("acme", email)
    );
    assert_eq!(status.pending, 2, "nothing queued is lost");
    assert_eq!(status.rejections + status.conflicts, 0);
    assert!(
        tokens.load(&store_id(&desk)).expect("tokens").is_none(),
        "the dead token is forgotten"
    );
    // The dead token is forgotten; syncing says "sign in", not a network error.
    assert!(matches!(desk.sync_once().await, Err(Error::NotSignedIn)));
    // Acts may still be queued while signed out (the desk never loses input).
    desk.edit_order(
        order,
        OrderHeaderSet {
            notes: Some(Some("typed while signed out".into())),
            ..Default::default()
        },
    )
    .expect("queued while signed out");

    // Reactivated with a new password, the same user signs in again: the
    // queue goes out as made.
    admin.set_user_active(user, true).await;
    let again = admin.reset_password(user).await;
    assert!(
        desk.login(&server.url(), "acme", email, &password, "test desk", false)
            .await
            .is_err(),
        "the old password no longer works"
    );
    desk.login(&server.url(), "acme", email, &again, "test desk", false)
        .await
        .expect("sign in again");
    assert!(desk.status().expect("status").signed_out.is_none());
    sync_until_settled(&desk, 5).await;
    let reader = server.token("priya@acme.test").await;
    let doc = server.order(&reader, order).await;
    assert_eq!(doc.customer_po.as_deref(), Some("PO-REVOKED"));
    assert_eq!(doc.notes.as_deref(), Some("typed while signed out"));
    assert_eq!(doc.lines.len(), 1);
    assert_eq!(doc.version, 3, "each act applied once");
    assert_eq!(doc.updated_by, user);
    assert!(
        tokens.load(&store_id(&desk)).expect("tokens").is_some(),
        "the new token is kept"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_password_reset_signs_the_desk_out_too(db: PgPool) {
    let server = Server::start(db).await;
    let admin = Admin::new(&server).await;
    let email = "reset.me@acme.test";
    let (user, password) = admin.create_user(email, "Reset Me").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(dir.path(), "reset", fast_config());
    desk.login(&server.url(), "acme", email, &password, "test desk", false)
        .await
        .expect("sign in");
    desk.sync_once().await.expect("first sync");
    let fresh = admin.reset_password(user).await;
    let order = desk
        .create_order(NewOrder {
            customer_id: tokyo(),
            ..Default::default()
        })
        .expect("queued");
    assert!(matches!(desk.sync_once().await, Err(Error::Unauthorized)));
    let status = desk.status().expect("status");
    assert!(status.signed_in.is_none());
    assert_eq!(
        status.signed_out.and_then(|s| s.reason).as_deref(),
        Some("Signed out by an administrator.")
    );
    assert_eq!(status.pending, 1);
    desk.login(&server.url(), "acme", email, &fresh, "test desk", false)
        .await
        .expect("sign in with the new password");
    sync_until_settled(&desk, 5).await;
    let reader = server.token("priya@acme.test").await;
    assert_eq!(server.order(&reader, order).await.version, 1);
}
