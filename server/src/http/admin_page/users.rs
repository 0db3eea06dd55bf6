//! The Users section: the tenant's people (name, email, role, active), a
//! form to add one, and per user a page to rename, change role, deactivate
//! or reactivate, and reset the password. Logic: `master::users`.
//!
//! A generated password is shown once, on the answer to the POST that made
//! it — not after a redirect, since the way from a POST to a later GET would
//! have to park the password somewhere (a URL, a cookie, server memory).
//! Pages are `no-store`, so the back button cannot show it again, and a
//! browser's resubmit replays the stored answer, which has no password: the
//! page then says so and offers a reset.

use std::fmt::{self, Write as _};

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use holdfast_protocol::admin::{CreateUser, CreatedUser, NewPassword, PatchUser, User};
use holdfast_protocol::model::Role;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::form::{input, select, write_fields, Field};
use super::handlers::{tenant_of, Tenant};
use super::html::{
    html, message_page, notice, page_end, page_start, redirect, sentence, shell, Escaped, Section,
};
use super::write::{field_error, page_write, reply, Refusal, Reply, Viewer, Write};
use super::PageResult;
use crate::master::users::{self, NewUser, UserChange};
use crate::AppState;

const ROLES: [(&str, &str); 2] = [
    ("account_manager", "Account manager"),
    ("operator", "Operator"),
];

fn role_name(role: Role) -> &'static str {
    match role {
        Role::AccountManager => "account manager",
        Role::Operator => "operator",
    }
}

/// The `?done=…&id=…` a successful write redirects with.
#[derive(Deserialize)]
pub(crate) struct Done {
    done: Option<String>,
    id: Option<Uuid>,
}

/// Blanks the one-time password in the copy of an answer kept for replays.
fn forget_password(body: &mut Value) {
    if let Some(password) = body.get_mut("password") {
        *password = Value::Null;
    }
}

/// What the add-a-user form holds (empty, or as the operator typed it).
#[derive(Default)]
struct NewForm {
    display_name: String,
    email: String,
    role: String,
}

/// `GET /admin/users`
pub(crate) async fn list(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    done: Result<Query<Done>, QueryRejection>,
) -> PageResult {
    let done = done.ok().map(|Query(d)| d);
    render_list(&state, &session, done.as_ref(), &NewForm::default(), None).await
}

async fn render_list(
    state: &AppState,
    session: &super::session::Session,
    done: Option<&Done>,
    form: &NewForm,
    refusal: Option<&Refusal>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let people = users::list(&state.db, &session.caller).await?.users;
    let mut b = String::new();
    let _ = list_page(&mut b, session, &tenant, &people, done, form, refusal);
    let status = refusal.map_or(StatusCode::OK, |r| r.status);
    Ok(html(status, shell("Users", &b)))
}

fn list_page(
    b: &mut String,
    session: &super::session::Session,
    tenant: &Tenant,
    people: &[User],
    done: Option<&Done>,
    form: &NewForm,
    refusal: Option<&Refusal>,
) -> fmt::Result {
    page_start(b, session, &tenant.name, Section::Users)?;
    b.push_str("<h2>Users</h2>");
    if let Some(d) = done {
        let who =
            d.id.and_then(|id| people.iter().find(|u| u.id == id))
                .map(|u| u.display_name.as_str());
        let text = match (d.done.as_deref(), who) {
            (Some("saved"), Some(who)) => Some(format!("Saved the changes to {who}.")),
            (Some("deactivated"), Some(who)) => Some(format!(
                "Deactivated {who}: signed out of every desk, and cannot sign in until reactivated."
            )),
            (Some("reactivated"), Some(who)) => {
                Some(format!("Reactivated {who}: they can sign in again."))
            }
            _ => None,
        };
        if let Some(text) = text {
            notice(b, true, &text, &[])?;
        }
    }
    if let Some(r) = refusal {
        notice(
            b,
            false,
            &r.message,
            &r.others(&["display_name", "email", "role"]),
        )?;
    }
    let error = |f: &str| refusal.and_then(|r| r.field(f));

    b.push_str(
        "<section class=\"panel\" aria-labelledby=\"add-user\"><h3 id=\"add-user\">Add a user</h3>\
         <form method=\"post\" action=\"/admin/users\">",
    );
    write_fields(b, &session.csrf)?;
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("display_name", "Display name", &form.display_name)
            .error(error("display_name"))
            .attrs("required maxlength=\"200\" autocomplete=\"off\""),
    )?;
    input(
        b,
        &Field::text("email", "Email (their sign-in name)", &form.email)
            .kind("email")
            .error(error("email"))
            .attrs("required autocomplete=\"off\""),
    )?;
    let role = if form.role.is_empty() {
        "account_manager"
    } else {
        &form.role
    };
    select(
        b,
        &Field::text("role", "Role", "").error(error("role")),
        &ROLES,
        role,
    )?;
    b.push_str(
        "<div class=\"field submit\"><button type=\"submit\">Create user</button></div></div>\
         <p class=\"hint\">Holdfast makes their password and shows it to you once, on the next \
         page.</p></form></section>",
    );

    write!(
        b,
        "<h3>People ({})</h3><table><thead><tr><th scope=\"col\">Name</th>\
         <th scope=\"col\">Email</th><th scope=\"col\">Role</th><th scope=\"col\">Status</th>\
         </tr></thead><tbody>",
        people.len()
    )?;
    for u in people {
        write!(
            b,
            "<tr{}><td><a href=\"/admin/users/{}\">{}</a>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if u.active { "" } else { " class=\"inactive\"" },
            u.id,
            Escaped(&u.display_name),
            if u.id == session.caller.user_id {
                " <span class=\"meta\">(you)</span>"
            } else {
                ""
            },
            Escaped(&u.email),
            sentence(role_name(u.role)),
            if u.active {
                "<span class=\"ok\">Active</span>"
            } else {
                "<span class=\"warn\">Deactivated</span>"
            },
        )?;
    }
    b.push_str(
        "</tbody></table><p class=\"hint\">Choose a name to rename, change the role, \
                deactivate or reset the password.</p>",
    );
    page_end(b);
    Ok(())
}

/// `POST /admin/users`
pub(crate) async fn create(State(state): State<AppState>, write: Write) -> PageResult {
    let form = NewForm {
        display_name: write.text("display_name"),
        email: write.text("email"),
        role: write.text("role"),
    };
    let Some(role) = Role::parse(&form.role) else {
        let refusal = Refusal::invalid(vec![field_error("role", "choose a role")]);
        return render_list(&state, &write.session, None, &form, Some(&refusal)).await;
    };
    let body = CreateUser {
        email: form.email.clone(),
        display_name: form.display_name.clone(),
        role,
    };
    let new = match NewUser::check(body) {
        Ok(new) => new,
        Err(crate::error::Error::Problem(p)) => {
            let refusal = Refusal::from_problem(&p);
            return render_list(&state, &write.session, None, &form, Some(&refusal)).await;
        }
        Err(e) => return Err(e.into()),
    };
    let secret = users::generated_secret().await?;
    let caller = write.session.caller.clone();
    let outcome = page_write!(
        state,
        &write,
        |tx| users::create_in_tx(&mut tx, &caller, &new, &secret),
        redact = forget_password
    );
    match reply::<CreatedUser>(&outcome)? {
        Reply::Done(value) => {
            let tenant = tenant_of(&state, &caller).await?;
            let what = format!(
                "Created {} ({}) as {}.",
                value.user.display_name,
                value.user.email,
                role_name(value.user.role)
            );
            let shown = Shown {
                user: &value.user,
                password: value.password.as_deref(),
                what: &what,
                reset: false,
            };
            Ok(password_page(&write, &tenant, &shown))
        }
        Reply::Refused(refusal) => {
            render_list(&state, &write.session, None, &form, Some(&refusal)).await
        }
    }
}

/// A generated password and whose it is (None: a replay, not shown again).
struct Shown<'a> {
    user: &'a User,
    password: Option<&'a str>,
    what: &'a str,
    /// A reset (which signs the user out) rather than a new user.
    reset: bool,
}

/// The one page a generated password is ever on; or, for a replay (the
/// same form sent again), the page that says it cannot be shown again.
fn password_page(write: &Write, tenant: &Tenant, shown: &Shown<'_>) -> Response {
    let mut b = String::new();
    let _ = password_body(&mut b, write, tenant, shown);
    html(StatusCode::OK, shell("Password", &b))
}

fn password_body(b: &mut String, write: &Write, tenant: &Tenant, shown: &Shown<'_>) -> fmt::Result {
    let session = &write.session;
    let Shown {
        user,
        password,
        what,
        reset,
    } = *shown;
    page_start(b, session, &tenant.name, Section::Users)?;
    let name = Escaped(&user.display_name);
    match password {
        Some(password) => {
            write!(b, "<h2>Password for {name}</h2>")?;
            notice(b, true, what, &[])?;
            write!(
                b,
                "<div class=\"panel\"><p>{name} signs in with tenant <b>{}</b>, email <b>{}</b> \
                 and this password:</p><p><code class=\"secret\" id=\"password\">{}</code></p>\
                 <p><strong>Copy it now: it will not be shown again.</strong> Holdfast keeps \
                 only a one-way hash of it, so nobody can look it up later; if it is lost, \
                 reset the password. Give it to {name} in person or over a channel you trust; \
                 they can change it after signing in.</p></div>",
                Escaped(&tenant.slug),
                Escaped(&user.email),
                Escaped(password)
            )?;
        }
        None => {
            write!(b, "<h2>Password for {name}</h2>")?;
            notice(
                b,
                false,
                "This form had been sent already (twice in a row, or again from the browser), \
                 so nothing new was done, and the password cannot be shown again.",
                &[],
            )?;
            write!(
                b,
                "<div class=\"panel\"><p>The password was shown once, on the first answer, and \
                 is not kept anywhere. If nobody copied it, make a new one (this signs {name} \
                 out of every desk):</p>\
                 <form method=\"post\" action=\"/admin/users/{}/reset-password\">",
                user.id
            )?;
            write_fields(b, &session.csrf)?;
            write!(
                b,
                "<button type=\"submit\">Reset the password of {name}</button></form></div>"
            )?;
        }
    }
    if reset && user.id == session.caller.user_id {
        b.push_str(
            "<p class=\"notice bad\" role=\"alert\">This was your own password: every session \
             of yours, this one too, has been signed out. Sign in again with it.</p>",
        );
    }
    write!(
        b,
        "<p class=\"actions\"><a href=\"/admin/users/{}\">Go to {name}</a>\
         <a href=\"/admin/users\">Back to all users</a></p>",
        user.id
    )?;
    page_end(b);
    Ok(())
}

/// The per-user page's forms as shown (the user's values, or what the
/// operator typed before a refusal).
struct EditForm {
    display_name: String,
    role: String,
}

/// `GET /admin/users/{id}`
pub(crate) async fn edit(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    id: Result<Path<Uuid>, PathRejection>,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_user());
    };
    render_edit(&state, &session, id, None, None).await
}

fn no_such_user() -> Response {
    message_page(
        StatusCode::NOT_FOUND,
        "No such user",
        "There is no such user in your tenant. Go back to the list of users.",
    )
}

async fn render_edit(
    state: &AppState,
    session: &super::session::Session,
    id: Uuid,
    form: Option<EditForm>,
    refusal: Option<&Refusal>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let people = users::list(&state.db, &session.caller).await?.users;
    let Some(user) = people.iter().find(|u| u.id == id) else {
        return Ok(no_such_user());
    };
    let form = form.unwrap_or_else(|| EditForm {
        display_name: user.display_name.clone(),
        role: user.role.as_str().to_owned(),
    });
    let mut b = String::new();
    let _ = edit_page(&mut b, session, &tenant, user, &form, refusal);
    let status = refusal.map_or(StatusCode::OK, |r| r.status);
    Ok(html(status, shell(&user.display_name, &b)))
}

fn edit_page(
    b: &mut String,
    session: &super::session::Session,
    tenant: &Tenant,
    user: &User,
    form: &EditForm,
    refusal: Option<&Refusal>,
) -> fmt::Result {
    page_start(b, session, &tenant.name, Section::Users)?;
    let name = Escaped(&user.display_name);
    let me = user.id == session.caller.user_id;
    write!(
        b,
        "<p><a href=\"/admin/users\">← All users</a></p><h2>{name}{}</h2>\
         <p class=\"meta\">{} · {} · {}</p>",
        if me { " (you)" } else { "" },
        Escaped(&user.email),
        sentence(role_name(user.role)),
        if user.active { "active" } else { "deactivated" }
    )?;
    if let Some(r) = refusal {
        notice(b, false, &r.message, &r.others(&["display_name", "role"]))?;
    }
    let error = |f: &str| refusal.and_then(|r| r.field(f));

    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"details\"><h3 id=\"details\">Name and role</h3>\
         <form method=\"post\" action=\"/admin/users/{}\">",
        user.id
    )?;
    write_fields(b, &session.csrf)?;
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("display_name", "Display name", &form.display_name)
            .error(error("display_name"))
            .attrs("required maxlength=\"200\" autocomplete=\"off\""),
    )?;
    select(
        b,
        &Field::text("role", "Role", "")
            .error(error("role"))
            .hint("Operators use this page; account managers use the desk."),
        &ROLES,
        &form.role,
    )?;
    b.push_str(
        "<div class=\"field submit\"><button type=\"submit\">Save changes</button></div></div>\
         </form></section>",
    );

    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"access\"><h3 id=\"access\">Access</h3>\
         <form method=\"post\" action=\"/admin/users/{}/active\">",
        user.id
    )?;
    write_fields(b, &session.csrf)?;
    if user.active {
        write!(
            b,
            "<input type=\"hidden\" name=\"active\" value=\"false\">\
             <p>Deactivating signs {name} out of every desk at once and stops them signing in. \
             Their orders stay as they are.{}</p>\
             <button type=\"submit\" class=\"danger\">Deactivate {name}</button></form></section>",
            if me {
                " This is you: you will be signed out."
            } else {
                ""
            }
        )?;
    } else {
        write!(
            b,
            "<input type=\"hidden\" name=\"active\" value=\"true\">\
             <p>{name} is deactivated and cannot sign in. Reactivating lets them sign in again \
             with their password (reset it if they no longer know it).</p>\
             <button type=\"submit\">Reactivate {name}</button></form></section>"
        )?;
    }

    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"password\"><h3 id=\"password\">Password</h3>\
         <form method=\"post\" action=\"/admin/users/{}/reset-password\">",
        user.id
    )?;
    write_fields(b, &session.csrf)?;
    write!(
        b,
        "<p>Makes a new password, shown to you once, and signs {name} out of every desk.{}</p>\
         <button type=\"submit\" class=\"secondary\">Reset password</button></form></section>",
        if me {
            " This is you: you will be signed out."
        } else {
            ""
        }
    )?;
    page_end(b);
    Ok(())
}

/// Runs a patch of one user from the page and answers it: back to the list
/// with a notice, or the user's page again with the refusal in words.
async fn patch_user(
    state: &AppState,
    write: &Write,
    id: Uuid,
    body: PatchUser,
    done: &str,
    form: Option<EditForm>,
) -> PageResult {
    let change = match UserChange::check(body) {
        Ok(change) => change,
        Err(crate::error::Error::Problem(p)) => {
            let refusal = Refusal::from_problem(&p);
            return render_edit(state, &write.session, id, form, Some(&refusal)).await;
        }
        Err(e) => return Err(e.into()),
    };
    let caller = write.session.caller.clone();
    let outcome = page_write!(state, write, |tx| users::patch_in_tx(
        &mut tx, &caller, id, &change
    ));
    match reply::<User>(&outcome)? {
        Reply::Done(value) => Ok(redirect(&format!(
            "/admin/users?done={done}&id={}",
            value.id
        ))),
        Reply::Refused(refusal) if refusal.status == StatusCode::NOT_FOUND => Ok(no_such_user()),
        Reply::Refused(refusal) => {
            render_edit(state, &write.session, id, form, Some(&refusal)).await
        }
    }
}

/// `POST /admin/users/{id}`: the name and the role.
pub(crate) async fn update(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_user());
    };
    let form = EditForm {
        display_name: write.text("display_name"),
        role: write.text("role"),
    };
    let Some(role) = Role::parse(&form.role) else {
        let refusal = Refusal::invalid(vec![field_error("role", "choose a role")]);
        return render_edit(&state, &write.session, id, Some(form), Some(&refusal)).await;
    };
    let body = PatchUser {
        display_name: Some(form.display_name.clone()),
        role: Some(role),
        active: None,
    };
    patch_user(&state, &write, id, body, "saved", Some(form)).await
}

/// `POST /admin/users/{id}/active`: deactivate (`active=false`) or
/// reactivate (`active=true`).
pub(crate) async fn set_active(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_user());
    };
    let active = match write.text("active").as_str() {
        "true" => true,
        "false" => false,
        _ => {
            let refusal = Refusal::invalid(vec![field_error("active", "must be true or false")]);
            return render_edit(&state, &write.session, id, None, Some(&refusal)).await;
        }
    };
    let body = PatchUser {
        active: Some(active),
        ..PatchUser::default()
    };
    let done = if active { "reactivated" } else { "deactivated" };
    patch_user(&state, &write, id, body, done, None).await
}

/// `POST /admin/users/{id}/reset-password`
pub(crate) async fn reset_password(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_user());
    };
    let caller = write.session.caller.clone();
    // Who it is, for the page, read before the reset revokes (perhaps) our
    // own session.
    let people = users::list(&state.db, &caller).await?.users;
    let Some(user) = people.into_iter().find(|u| u.id == id) else {
        return Ok(no_such_user());
    };
    let tenant = tenant_of(&state, &caller).await?;
    let secret = users::generated_secret().await?;
    let outcome = page_write!(
        state,
        &write,
        |tx| users::reset_password_in_tx(&mut tx, &caller, id, &secret),
        redact = forget_password
    );
    match reply::<NewPassword>(&outcome)? {
        Reply::Done(value) => {
            let what = format!(
                "Reset the password of {}; they have been signed out of every desk.",
                user.display_name
            );
            let shown = Shown {
                user: &user,
                password: value.password.as_deref(),
                what: &what,
                reset: true,
            };
            Ok(password_page(&write, &tenant, &shown))
        }
        Reply::Refused(refusal) if refusal.status == StatusCode::NOT_FOUND => Ok(no_such_user()),
        Reply::Refused(refusal) => {
            render_edit(&state, &write.session, id, None, Some(&refusal)).await
        }
    }
}
