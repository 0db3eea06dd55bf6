//! API.md v1.1 "Users" over real HTTP: operators create users (a generated
//! password shown once), deactivate them (their tokens die at once), reset
//! passwords; everyone changes their own; the tenant always keeps an active
//! operator; and `holdfast-server tenant create` makes a tenant whose
//! operator can sign in.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use holdfast_server::demo;

use crate::support::process::{database_url, db_name};
use crate::support::{assert_problem, key, Raw, TestServer, MIGRATIONS};

const OPS: &str = "ops@acme.test";
const DANA: &str = "dana@acme.test";

/// Signs in with `password`: the token, or the failing status and body.
async fn sign_in(
    s: &TestServer,
    tenant: &str,
    email: &str,
    password: &str,
) -> Result<String, (StatusCode, Value)> {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/sessions",
            None,
            Some(
                json!({"tenant": tenant, "email": email, "password": password,
                        "device_name": "test desk"}),
            ),
        )
        .await;
    if status == StatusCode::CREATED {
        Ok(body["token"].as_str().expect("token").to_owned())
    } else {
        Err((status, body))
    }
}

async fn assert_sign_in_refused(s: &TestServer, tenant: &str, email: &str, password: &str) {
    let (status, body) = sign_in(s, tenant, email, password)
        .await
        .expect_err("sign-in must be refused");
    assert_problem(status, &body, 401, "unauthorized");
}

/// Creates a user as the operator behind `token`; their id and password.
async fn create_user(s: &TestServer, token: &str, email: &str, role: &str) -> (Uuid, String) {
    let r = s
        .post(
            token,
            "/v1/admin/users",
            &key(),
            json!({"email": email, "display_name": "New Person", "role": role}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let body = r.json();
    let id = body["user"]["id"]
        .as_str()
        .expect("id")
        .parse()
        .expect("uuid");
    (id, body["password"].as_str().expect("password").to_owned())
}

async fn patch_user(s: &TestServer, token: &str, id: Uuid, key: &str, body: Value) -> Raw {
    s.mutate(
        token,
        Method::PATCH,
        &format!("/v1/admin/users/{id}"),
        key,
        &body,
    )
    .await
}

async fn reset(s: &TestServer, token: &str, id: Uuid, key: &str) -> Raw {
    let resp = s
        .http
        .post(s.url(&format!("/v1/admin/users/{id}/reset-password")))
        .bearer_auth(token)
        .header("idempotency-key", key)
        .send()
        .await
        .expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body").to_vec();
    Raw {
        status,
        headers,
        bytes,
    }
}

async fn change_password(s: &TestServer, token: &str, key: &str, current: &str, new: &str) -> Raw {
    s.post(
        token,
        "/v1/sessions/current/password",
        key,
        json!({"current": current, "new": new}),
    )
    .await
}

fn assert_raw_problem(r: &Raw, status: u16, code: &str) {
    assert_problem(r.status, &r.json(), status, code);
}

async fn users_with_email(db: &PgPool, email: &str) -> i64 {
    sqlx::query_scalar("select count(*) from users where email = $1")
        .bind(email)
        .fetch_one(db)
        .await
        .expect("count")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_created_user_signs_in_and_a_replay_hides_the_password(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", OPS).await;
    let k = key();
    let body = json!({"email": "  Ana@Acme.TEST ", "display_name": " Ana Alves ", "role": "account_manager"});
    let first = s.post(&ops, "/v1/admin/users", &k, body.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.json());
    assert!(!first.replayed());
    let created = first.json();
    assert_eq!(created["user"]["email"], "ana@acme.test");
    assert_eq!(created["user"]["display_name"], "Ana Alves");
    assert_eq!(created["user"]["role"], "account_manager");
    assert_eq!(created["user"]["active"], true);
    let password = created["password"].as_str().expect("password").to_owned();
    assert!(password.len() >= 20, "{password}");

    let token = sign_in(&s, "acme", "ana@acme.test", &password)
        .await
        .expect("the shown password signs in");
    let (status, _) = s.get("/v1/skus", &token).await;
    assert_eq!(status, StatusCode::OK);

    // The same request again: the stored answer, without the password.
    let replay = s.post(&ops, "/v1/admin/users", &k, body).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert!(replay.replayed());
    let replayed = replay.json();
    assert_eq!(replayed["user"], created["user"]);
    assert_eq!(replayed["password"], Value::Null);
    assert_eq!(users_with_email(&db, "ana@acme.test").await, 1);
    // Nor does the database keep it anywhere.
    let stored: i64 = sqlx::query_scalar(
        "select count(*) from idempotency_keys where position($1::bytea in response_body) > 0",
    )
    .bind(password.as_bytes())
    .fetch_one(&db)
    .await
    .expect("keys");
    assert_eq!(stored, 0);

    // An email the tenant has, in any case, is a validation failure on email.
    let dup = s
        .post(
            &ops,
            "/v1/admin/users",
            &key(),
            json!({"email": "ANA@acme.test", "display_name": "Other", "role": "operator"}),
        )
        .await;
    assert_raw_problem(&dup, 400, "validation_failed");
    assert_eq!(dup.json()["errors"][0]["field"], "email");
    assert_eq!(users_with_email(&db, "ana@acme.test").await, 1);

    let (status, list) = s.get("/v1/admin/users", &ops).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let emails: Vec<&str> = list["users"]
        .as_array()
        .expect("users")
        .iter()
        .filter_map(|u| u["email"].as_str())
        .collect();
    assert_eq!(
        emails,
        [
            "ana@acme.test",
            "dana@acme.test",
            "ops@acme.test",
            "priya@acme.test"
        ]
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn deactivating_revokes_the_users_tokens_and_sign_in(db: PgPool) {
    let s = TestServer::start(db).await;
    let ops = s.login("acme", OPS).await;
    let (id, password) = create_user(&s, &ops, "bo@acme.test", "account_manager").await;
    let desk1 = sign_in(&s, "acme", "bo@acme.test", &password)
        .await
        .expect("sign in");
    let desk2 = sign_in(&s, "acme", "bo@acme.test", &password)
        .await
        .expect("sign in");
    assert_eq!(s.get("/v1/skus", &desk1).await.0, StatusCode::OK);

    let r = patch_user(&s, &ops, id, &key(), json!({"active": false})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["active"], false);
    for token in [&desk1, &desk2] {
        let (status, body) = s.get("/v1/skus", token).await;
        assert_problem(status, &body, 401, "unauthorized");
    }
    assert_sign_in_refused(&s, "acme", "bo@acme.test", &password).await;

    // Reactivated, they sign in afresh; the old tokens stay dead.
    let r = patch_user(
        &s,
        &ops,
        id,
        &key(),
        json!({"active": true, "display_name": "Bo"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["display_name"], "Bo");
    assert_eq!(s.get("/v1/skus", &desk1).await.0, StatusCode::UNAUTHORIZED);
    sign_in(&s, "acme", "bo@acme.test", &password)
        .await
        .expect("reactivated user signs in");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_reset_revokes_every_token_and_the_new_password_works(db: PgPool) {
    let s = TestServer::start(db).await;
    let ops = s.login("acme", OPS).await;
    let dana = s.login("acme", DANA).await;
    let dana_id = demo::user_id("acme", DANA);
    let k = key();
    let r = reset(&s, &ops, dana_id, &k).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let password = r.json()["password"].as_str().expect("password").to_owned();

    let (status, body) = s.get("/v1/skus", &dana).await;
    assert_problem(status, &body, 401, "unauthorized");
    assert_sign_in_refused(&s, "acme", DANA, demo::DEMO_PASSWORD).await;
    sign_in(&s, "acme", DANA, &password)
        .await
        .expect("the new password signs in");

    let replay = reset(&s, &ops, dana_id, &k).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert!(replay.replayed());
    assert_eq!(replay.json(), json!({"password": null}));
    sign_in(&s, "acme", DANA, &password)
        .await
        .expect("a replay changed nothing");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn changing_ones_own_password_keeps_this_token_only(db: PgPool) {
    let s = TestServer::start(db).await;
    let here = s.login("acme", DANA).await;
    let elsewhere = s.login("acme", DANA).await;
    let new = "correct horse battery staple";

    let wrong = change_password(&s, &here, &key(), "not my password", new).await;
    assert_raw_problem(&wrong, 400, "validation_failed");
    assert_eq!(wrong.json()["errors"][0]["field"], "current");
    let short = change_password(&s, &here, &key(), demo::DEMO_PASSWORD, "short").await;
    assert_raw_problem(&short, 400, "validation_failed");
    assert_eq!(short.json()["errors"][0]["field"], "new");

    let k = key();
    let r = change_password(&s, &here, &k, demo::DEMO_PASSWORD, new).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.json());
    assert!(r.bytes.is_empty());
    assert_eq!(s.get("/v1/skus", &here).await.0, StatusCode::OK);
    let (status, body) = s.get("/v1/skus", &elsewhere).await;
    assert_problem(status, &body, 401, "unauthorized");
    assert_sign_in_refused(&s, "acme", DANA, demo::DEMO_PASSWORD).await;
    sign_in(&s, "acme", DANA, new)
        .await
        .expect("the new password signs in");

    // A retry of the same change replays; the same key for another one is
    // a reused key, though the stored fingerprint holds no password.
    let replay = change_password(&s, &here, &k, demo::DEMO_PASSWORD, new).await;
    assert_eq!(replay.status, StatusCode::NO_CONTENT);
    assert!(replay.replayed());
    let reused = change_password(&s, &here, &k, new, "another long password").await;
    assert_raw_problem(&reused, 422, "idempotency_key_reused");
    sign_in(&s, "acme", DANA, new)
        .await
        .expect("the password is still the first change's");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_last_active_operator_stays_one(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", OPS).await;
    let ops_id = demo::user_id("acme", OPS);

    let k = key();
    let r = patch_user(&s, &ops, ops_id, &k, json!({"active": false})).await;
    assert_raw_problem(&r, 422, "invalid_state");
    // A stored outcome: the same request replays it.
    let again = patch_user(&s, &ops, ops_id, &k, json!({"active": false})).await;
    assert_raw_problem(&again, 422, "invalid_state");
    assert!(again.replayed());
    let r = patch_user(&s, &ops, ops_id, &key(), json!({"role": "account_manager"})).await;
    assert_raw_problem(&r, 422, "invalid_state");
    // Renaming the last operator is fine.
    let r = patch_user(&s, &ops, ops_id, &key(), json!({"display_name": "Olu"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(s.get("/v1/skus", &ops).await.0, StatusCode::OK);

    // With a second operator, the first can step down.
    let (second_id, password) = create_user(&s, &ops, "op2@acme.test", "operator").await;
    let second = sign_in(&s, "acme", "op2@acme.test", &password)
        .await
        .expect("sign in");
    let r = patch_user(&s, &ops, ops_id, &key(), json!({"role": "account_manager"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["role"], "account_manager");
    let (status, body) = s.get("/v1/admin/users", &ops).await;
    assert_problem(status, &body, 403, "forbidden");
    // ... and now the second is the last.
    let r = patch_user(&s, &second, second_id, &key(), json!({"active": false})).await;
    assert_raw_problem(&r, 422, "invalid_state");

    // Two operators demoting each other at once: one of them stays.
    let r = patch_user(&s, &second, ops_id, &key(), json!({"role": "operator"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    for round in 0..5 {
        let (ka, kb) = (key(), key());
        let (a, b) = tokio::join!(
            patch_user(&s, &ops, second_id, &ka, json!({"active": false})),
            patch_user(&s, &second, ops_id, &kb, json!({"role": "account_manager"})),
        );
        let mut statuses = [a.status.as_u16(), b.status.as_u16()];
        statuses.sort_unstable();
        assert!(
            statuses == [200, 422] || statuses == [200, 401] || statuses == [200, 403],
            "round {round}: {statuses:?} {} {}",
            a.json(),
            b.json()
        );
        let operators: i64 = sqlx::query_scalar(
            "select count(*) from users where tenant_id = $1 and role = 'operator' and active",
        )
        .bind(demo::tenant_id("acme"))
        .fetch_one(&db)
        .await
        .expect("count");
        assert_eq!(operators, 1, "round {round}");
        // Back to two operators for the next round.
        let survivor = if a.status == StatusCode::OK {
            &ops
        } else {
            &second
        };
        let fix = if a.status == StatusCode::OK {
            json!({"active": true})
        } else {
            json!({"role": "operator"})
        };
        let target = if a.status == StatusCode::OK {
            second_id
        } else {
            ops_id
        };
        let r = patch_user(&s, survivor, target, &key(), fix).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_account_manager_gets_403_on_every_admin_users_route(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", DANA).await;
    let priya = demo::user_id("acme", "priya@acme.test");
    let (status, body) = s.get("/v1/admin/users", &dana).await;
    assert_problem(status, &body, 403, "forbidden");
    let r = s
        .post(
            &dana,
            "/v1/admin/users",
            &key(),
            json!({"email": "x@acme.test", "display_name": "X", "role": "operator"}),
        )
        .await;
    assert_raw_problem(&r, 403, "forbidden");
    let r = patch_user(&s, &dana, priya, &key(), json!({"active": false})).await;
    assert_raw_problem(&r, 403, "forbidden");
    let r = reset(&s, &dana, priya, &key()).await;
    assert_raw_problem(&r, 403, "forbidden");
    // Nothing changed for Priya.
    s.login("acme", "priya@acme.test").await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn another_tenants_user_is_not_found(db: PgPool) {
    let s = TestServer::start(db).await;
    let ops = s.login("acme", OPS).await;
    let gina = demo::user_id("globex", "gina@globex.test");
    for id in [gina, Uuid::now_v7()] {
        let r = patch_user(&s, &ops, id, &key(), json!({"active": false})).await;
        assert_raw_problem(&r, 404, "not_found");
        let r = reset(&s, &ops, id, &key()).await;
        assert_raw_problem(&r, 404, "not_found");
    }
    // Gina is untouched: active, with her own password.
    s.login("globex", "gina@globex.test").await;
}

fn tenant_create(db: &PgPool, slug: &str, email: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"));
    cmd.args(["tenant", "create", "--slug", slug, "--name", "Initech Corp"])
        .args([
            "--operator-email",
            email,
            "--operator-name",
            "Bill Lumbergh",
        ])
        .env("DATABASE_URL", database_url(&db_name(db)))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn tenant_create_makes_a_tenant_whose_operator_signs_in(db: PgPool) {
    let out = tenant_create(&db, "initech", "Bill@Initech.test")
        .output()
        .await
        .expect("run holdfast-server");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stdout}\n{stderr}", out.status);
    assert!(stdout.contains("tenant: initech"), "{stdout}");
    assert!(stdout.contains("email: bill@initech.test"), "{stdout}");
    let password = stdout
        .lines()
        .find_map(|l| l.strip_prefix("password: "))
        .expect("a password line")
        .trim()
        .to_owned();

    let s = TestServer::start(db.clone()).await;
    let token = sign_in(&s, "initech", "bill@initech.test", &password)
        .await
        .expect("the printed password signs in");
    let (status, list) = s.get("/v1/admin/users", &token).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["users"][0]["role"], "operator");
    assert_eq!(list["users"][0]["display_name"], "Bill Lumbergh");
    assert_eq!(list["users"].as_array().map(Vec::len), Some(1));

    // The same slug again: refused by name, nothing created.
    let again = tenant_create(&db, "initech", "other@initech.test")
        .output()
        .await
        .expect("run holdfast-server");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "a second create must fail");
    assert!(stderr.contains("\"initech\" already exists"), "{stderr}");
    assert_eq!(users_with_email(&db, "other@initech.test").await, 0);

    // A slug the database would refuse is refused before it is opened.
    let bad = tenant_create(&db, "Initech_2", "x@initech.test")
        .output()
        .await
        .expect("run holdfast-server");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(stderr.contains("not a valid slug"), "{stderr}");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn wrong_current_passwords_are_throttled(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", DANA).await;
    let new = "correct horse battery staple";
    for _ in 0..5 {
        let r = change_password(&s, &dana, &key(), "a guess", new).await;
        assert_raw_problem(&r, 400, "validation_failed");
    }
    let r = change_password(&s, &dana, &key(), demo::DEMO_PASSWORD, new).await;
    assert_raw_problem(&r, 429, "rate_limited");
    assert!(r.headers.contains_key("retry-after"));
    sign_in(&s, "acme", DANA, demo::DEMO_PASSWORD)
        .await
        .expect("the password did not change");
}
