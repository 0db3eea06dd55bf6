//! `sync_state`: the one row that says who this desk is (server, tenant, user
//! — never the token) and where its sync stands (pull cursor, last success,
//! the store-wide backoff after network errors).

use rusqlite::{params, OptionalExtension, Transaction};
use serde::Serialize;
use uuid::Uuid;

use super::{Migration, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[
    (
        1,
        "create table sync_state (
        id              integer primary key check (id = 1),
        -- Minted once per store: names this desk's token in the keychain.
        store_id        text not null,
        server_url      text,
        tenant_slug     text,
        tenant_name     text,
        user_id         text,
        user_email      text,
        user_name       text,
        device_name     text,
        -- The pull feed's opaque cursor; null = never pulled (full state next).
        cursor          text,
        last_push_at    integer,
        last_pull_at    integer,
        -- The last pass that pushed and pulled without a network error.
        last_synced_at  integer,
        -- Consecutive failed passes (network, 5xx): the backoff exponent.
        failures        integer not null default 0,
        next_attempt_at integer,
        last_error      text,
        -- 1 after a pass reached the server, 0 after one could not.
        online          integer
    );
    insert into sync_state (id, store_id) values (1, lower(hex(randomblob(16))));",
    ),
    (
        2,
        // v1.1 documents carry prices, codes and active flags the mirror
        // did not keep: pull everything again rather than show defaults.
        // `signed_out_reason`: why the server ended this desk's session (its
        // token answered 401), for the sign-in screen; null after a sign-in
        // or a sign-out of the user's own.
        "update sync_state set cursor = null;
    alter table sync_state add column signed_out_reason text;",
    ),
    (
        3,
        // Since when the desk has been online without a break (null while
        // offline or signed out): an act pending for long while online is
        // stuck, one pending for long because the desk was offline is not.
        "alter table sync_state add column online_since integer;",
    ),
    (
        7,
        // `history`: the server database's history the cursor and mirrors
        // belong to (PullResponse::history), sent with every push so a
        // server restored from a backup refuses a queue made against a newer
        // state. `restore_started_at`: the server was found restored and the
        // desk is pulling everything again; once caught up, it re-queues the
        // journaled acts the server lacks (see `acked`).
        "alter table sync_state add column history text;
    alter table sync_state add column restore_started_at integer;",
    ),
];

/// Milliseconds since the epoch by SQLite's clock, for statements that go
/// online without a `now` of their own.
const SQL_NOW_MS: &str = "cast((julianday('now') - 2440587.5) * 86400000 as integer)";

/// Who is signed in on this store.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub server_url: String,
    pub tenant_slug: String,
    pub tenant_name: String,
    pub user_id: Uuid,
    pub user_email: String,
    pub user_name: String,
    pub device_name: String,
}

/// The whole row.
#[derive(Debug, Clone, Serialize)]
pub struct SyncState {
    pub store_id: String,
    pub profile: Option<Profile>,
    pub cursor: Option<String>,
    pub last_push_at: Option<i64>,
    pub last_pull_at: Option<i64>,
    pub last_synced_at: Option<i64>,
    pub failures: u32,
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    pub online: Option<bool>,
    /// Why the server ended this desk's session (None: it did not).
    pub signed_out_reason: Option<String>,
    /// Online without a break since then (ms); None while not online.
    pub online_since: Option<i64>,
    /// The server history of the last pull (None: not pulled yet, or a
    /// server that names none).
    pub history: Option<String>,
    /// Since when the desk has been catching up with a restored server
    /// (None: it is not).
    pub restore_started_at: Option<i64>,
}

pub fn get(tx: &Transaction<'_>) -> StoreResult<SyncState> {
    let row = tx
        .prepare_cached(
            "select store_id, server_url, tenant_slug, tenant_name, user_id, user_email, user_name,
                device_name, cursor, last_push_at, last_pull_at, last_synced_at, failures,
                next_attempt_at, last_error, online, signed_out_reason, online_since, history,
                restore_started_at
           from sync_state where id = 1",
        )?
        .query_row([], |r| {
            let server_url: Option<String> = r.get(1)?;
            let user_id: Option<String> = r.get(4)?;
            let profile = match (server_url, user_id) {
                (Some(server_url), Some(user_id)) => Some((server_url, user_id)),
                _ => None,
            };
            Ok((
                r.get::<_, String>(0)?,
                profile,
                (
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, Option<String>>(7)?,
                ),
                SyncState {
                    store_id: String::new(),
                    profile: None,
                    cursor: r.get(8)?,
                    last_push_at: r.get(9)?,
                    last_pull_at: r.get(10)?,
                    last_synced_at: r.get(11)?,
                    failures: r.get(12)?,
                    next_attempt_at: r.get(13)?,
                    last_error: r.get(14)?,
                    online: r.get::<_, Option<i64>>(15)?.map(|v| v != 0),
                    signed_out_reason: r.get(16)?,
                    online_since: r.get(17)?,
                    history: r.get(18)?,
                    restore_started_at: r.get(19)?,
                },
            ))
        })?;
    let (store_id, ids, (slug, tname, email, uname, device), mut state) = row;
    state.store_id = store_id;
    if let Some((server_url, user_id)) = ids {
        let user_id = user_id
            .parse()
            .map_err(|_| super::StoreError::Corrupt(format!("user id {user_id:?}")))?;
        state.profile = Some(Profile {
            server_url,
            tenant_slug: slug.unwrap_or_default(),
            tenant_name: tname.unwrap_or_default(),
            user_id,
            user_email: email.unwrap_or_default(),
            user_name: uname.unwrap_or_default(),
            device_name: device.unwrap_or_default(),
        });
    }
    Ok(state)
}

/// Records who signed in. A different user or server starts a fresh feed
/// (cursor cleared): the mirrors are what *they* may see.
pub fn set_profile(tx: &Transaction<'_>, p: &Profile) -> StoreResult<()> {
    let same: Option<bool> = tx
        .prepare_cached("select server_url = ?1 and tenant_slug = ?2 from sync_state where id = 1")?
        .query_row(params![p.server_url, p.tenant_slug], |r| {
            r.get::<_, Option<bool>>(0)
        })
        .optional()?
        .flatten();
    tx.prepare_cached(
        "update sync_state set server_url = ?1, tenant_slug = ?2, tenant_name = ?3, user_id = ?4,
                user_email = ?5, user_name = ?6, device_name = ?7, failures = 0,
                next_attempt_at = null, last_error = null, signed_out_reason = null
          where id = 1",
    )?
    .execute(params![
        p.server_url,
        p.tenant_slug,
        p.tenant_name,
        p.user_id.to_string(),
        p.user_email,
        p.user_name,
        p.device_name
    ])?;
    if same != Some(true) {
        tx.prepare_cached("update sync_state set cursor = null where id = 1")?
            .execute([])?;
    }
    Ok(())
}

/// The last server, tenant and user this store was signed in to, kept after
/// logout: acts queued by that user must not go out under another.
pub fn last_identity(tx: &Transaction<'_>) -> StoreResult<Option<(String, String, String)>> {
    Ok(tx
        .prepare_cached("select server_url, tenant_slug, user_email from sync_state where id = 1")?
        .query_row([], |r| {
            Ok(match (r.get(0)?, r.get(1)?, r.get(2)?) {
                (Some(a), Some(b), Some(c)) => Some((a, b, c)),
                _ => None,
            })
        })?)
}

/// Forgets the signed-in user (the mirrors and pending acts stay).
pub fn clear_profile(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.prepare_cached(
        "update sync_state set user_id = null, online = null, online_since = null,
                signed_out_reason = null
          where id = 1",
    )?
    .execute([])?;
    Ok(())
}

/// The server ended the session (the token answered 401): forgets the
/// signed-in user as [`clear_profile`] does, and says why for the sign-in
/// screen. The last identity stays, so the same user can sign in again and
/// send what is queued.
pub fn session_ended(tx: &Transaction<'_>, reason: &str) -> StoreResult<()> {
    tx.prepare_cached(
        "update sync_state set user_id = null, online = null, online_since = null,
                signed_out_reason = ?1,
                failures = 0, next_attempt_at = null, last_error = null
          where id = 1",
    )?
    .execute([reason])?;
    Ok(())
}

/// A pulled page's cursor and the server history it was cut in.
pub fn set_cursor(
    tx: &Transaction<'_>,
    cursor: &str,
    history: Option<&str>,
    at: i64,
) -> StoreResult<()> {
    tx.prepare_cached(
        "update sync_state set cursor = ?1, history = ?2, last_pull_at = ?3 where id = 1",
    )?
    .execute(params![cursor, history, at])?;
    Ok(())
}

/// The server was restored from a backup: pull from the start, and remember
/// (until [`restore_caught_up`]) that the journal must be compared with what
/// comes. Mirrors are cleared by the caller ([`super::reset_mirrors`]).
pub fn restore_began(tx: &Transaction<'_>, now: i64) -> StoreResult<()> {
    tx.prepare_cached(
        "update sync_state set cursor = null, history = null,
                restore_started_at = coalesce(restore_started_at, ?1)
          where id = 1",
    )?
    .execute([now])?;
    Ok(())
}

/// The journal has been compared with the restored server's documents.
pub fn restore_caught_up(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.prepare_cached("update sync_state set restore_started_at = null where id = 1")?
        .execute([])?;
    Ok(())
}

pub fn pushed(tx: &Transaction<'_>, at: i64) -> StoreResult<()> {
    tx.prepare_cached("update sync_state set last_push_at = ?1 where id = 1")?
        .execute(params![at])?;
    Ok(())
}

/// A pass reached the server and finished: the backoff resets. `online`
/// false leaves the connectivity as it is: the live stream was lost while
/// the pass ran, so its answers prove nothing about now.
pub fn succeeded(tx: &Transaction<'_>, at: i64, online: bool) -> StoreResult<()> {
    tx.prepare_cached(
        "update sync_state set last_synced_at = ?1, failures = 0, next_attempt_at = null,
                last_error = case when ?2 then null else last_error end,
                online = case when ?2 then 1 else online end,
                online_since = case when not ?2 then online_since
                                    when online = 1 then coalesce(online_since, ?1)
                                    else ?1 end
          where id = 1",
    )?
    .execute(params![at, online])?;
    Ok(())
}

/// A pass could not reach the server (or it answered 5xx): the next automatic
/// attempt waits. `delay_ms` maps the new consecutive-failure count (1 for the
/// first) to the wait. Returns when the next attempt is due.
pub fn failed(
    tx: &Transaction<'_>,
    error: &str,
    offline: bool,
    now: i64,
    delay_ms: impl FnOnce(u32) -> i64,
) -> StoreResult<i64> {
    let failures: u32 = tx
        .prepare_cached(
            "update sync_state set failures = failures + 1, last_error = ?1,
                online = case when ?2 then 0 else online end,
                online_since = case when ?2 then null else online_since end
          where id = 1 returning failures",
        )?
        .query_row(params![error, offline], |r| r.get(0))?;
    let next = now.saturating_add(delay_ms(failures));
    tx.prepare_cached("update sync_state set next_attempt_at = ?1 where id = 1")?
        .execute(params![next])?;
    Ok(next)
}

/// The live stream to the server broke, or could not be opened: the desk is
/// offline until a request gets an answer again. Only the signed-in desk's
/// state changes (a signed-out one has no connectivity to speak of); the
/// pass backoff is left alone — the stream has its own retry.
pub fn stream_lost(tx: &Transaction<'_>, error: &str) -> StoreResult<()> {
    tx.prepare_cached(
        "update sync_state set online = 0, online_since = null, last_error = ?1
          where id = 1 and user_id is not null",
    )?
    .execute([error])?;
    Ok(())
}

/// Connectivity came back (the stream connected): retry at once.
pub fn reset_backoff(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.prepare_cached(&format!(
        "update sync_state set failures = 0, next_attempt_at = null, online = 1,
                online_since = case when online = 1 then coalesce(online_since, {SQL_NOW_MS})
                                    else {SQL_NOW_MS} end
          where id = 1"
    ))?
    .execute([])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[test]
    fn a_pass_that_outlived_a_lost_stream_does_not_claim_online() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        store
            .write(|tx| succeeded(tx, 1_000, true))
            .expect("first pass");
        let state = store.write(get).expect("state");
        assert_eq!(state.online, Some(true));
        assert_eq!(state.online_since, Some(1_000));

        // The stream went down (as `stream_lost` records it for a signed-in
        // desk), then a pass begun before that finished.
        store
            .write(|tx| {
                tx.execute(
                    "update sync_state set online = 0, online_since = null, last_error = 'gone'",
                    [],
                )?;
                succeeded(tx, 2_000, false)
            })
            .expect("late pass");
        let state = store.write(get).expect("state");
        assert_eq!(state.online, Some(false), "still offline");
        assert_eq!(state.online_since, None);
        assert_eq!(
            state.last_error.as_deref(),
            Some("gone"),
            "the loss is kept"
        );
        assert_eq!(
            state.last_synced_at,
            Some(2_000),
            "the pass itself is recorded"
        );

        store
            .write(|tx| succeeded(tx, 3_000, true))
            .expect("a pass after the loss");
        let state = store.write(get).expect("state");
        assert_eq!(state.online, Some(true));
        assert_eq!(state.online_since, Some(3_000));
        assert_eq!(state.last_error, None);
    }
}
