//! Credentials over HTTP: a request without a valid token is 401; tokens
//! are made, listed without their secret and revoked — a revoked token, and
//! the dashboard sessions opened with it, get 401 from the next request on,
//! on every front-end — and a disabled account's tokens get 403.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::*;

fn tokens_path(account: &str) -> String {
    format!("/api/v1/accounts/{account}/tokens")
}

/// A new API token of `account`, made by `by`: (token id, token).
async fn new_token(app: &App, by: &str, account: &str, name: &str) -> (String, String) {
    let r = app
        .post(&tokens_path(account), by, json!({ "name": name }))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let token = r.body["token"].as_str().expect("token").to_owned();
    assert!(token.starts_with("stk_"), "{token}");
    (r.body["id"].as_str().expect("id").to_owned(), token)
}

/// An E2B list with `X-API-Key: key`.
async fn e2b_list(app: &App, key: &str) -> Resp {
    app.e2b(Method::GET, "/e2b/sandboxes", key, None).await
}

/// Asserts `token` is refused with 401 on the native and the E2B API.
async fn assert_refused(app: &App, token: &str, sandbox: &str) {
    for path in [
        "/api/v1/me",
        "/api/v1/sandbox",
        &format!("/api/v1/sandbox/{sandbox}"),
    ] {
        app.get(path, token)
            .await
            .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let r = e2b_list(app, token).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    assert_eq!(r.body["code"], 401, "{}", r.body);
}

#[tokio::test]
async fn requests_without_a_valid_token_are_401() {
    let app = App::new().await;
    app.send(request(Method::GET, "/api/v1/sandbox", None, None))
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    app.get("/api/v1/sandbox", "stk_not_a_real_token")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    app.get_with("/api/v1/sandbox", "authorization", "Basic YWRtaW46YWRtaW4=")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let r = e2b_list(&app, "stk_not_a_real_token").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
}

#[tokio::test]
async fn a_new_token_works_and_is_listed_without_its_secret() {
    let (app, (alice, first)) = App::with_account("alice").await;
    let (id, token) = new_token(&app, &first, &alice, "ci").await;
    let me = app.get("/api/v1/me", &token).await;
    assert_eq!(me.body["account"]["name"], "alice", "{}", me.body);
    let list = app.get(&tokens_path(&alice), &first).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let listed = list.body["tokens"].as_array().expect("tokens");
    assert!(listed
        .iter()
        .any(|t| t["id"] == id.as_str() && t["name"] == "ci"));
    assert!(listed.iter().all(|t| t["kind"] == "api"), "{}", list.body);
    let text = list.body.to_string();
    assert!(
        !text.contains(&token) && !text.contains(&first),
        "a secret is listed: {text}"
    );
}

#[tokio::test]
async fn a_revoked_token_gets_401_everywhere_and_other_tokens_keep_working() {
    let (app, (alice, first)) = App::with_account("alice").await;
    let (id, token) = new_token(&app, &first, &alice, "laptop").await;
    let sandbox = app.create_id(&token, json!({})).await;
    let r = app.delete(&format!("/api/v1/tokens/{id}"), &first).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_refused(&app, &token, &sandbox).await;
    // The account's other token still reaches the sandbox, still running.
    let r = app.get(&format!("/api/v1/sandbox/{sandbox}"), &first).await;
    assert_eq!(r.body["status"], "RUNNING", "{}", r.body);
    // A second revoke of the same token finds nothing.
    app.delete(&format!("/api/v1/tokens/{id}"), &first)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn a_token_may_revoke_itself() {
    let (app, (alice, first)) = App::with_account("alice").await;
    let (id, token) = new_token(&app, &first, &alice, "once").await;
    let r = app.delete(&format!("/api/v1/tokens/{id}"), &token).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_refused(&app, &token, "abcdefghijkl").await;
}

#[tokio::test]
async fn another_accounts_token_is_404_unless_the_caller_is_an_admin() {
    let (app, (alice, alice_token)) = App::with_account("alice").await;
    let bob = app.tenant("bob").await;
    let (id, token) = new_token(&app, &alice_token, &alice, "ci").await;
    app.delete(&format!("/api/v1/tokens/{id}"), &bob)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    app.post(&tokens_path(&alice), &bob, json!({ "name": "mine-now" }))
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    app.get(&tokens_path(&alice), &bob)
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(app.get("/api/v1/me", &token).await.status, StatusCode::OK);
    let r = app
        .delete(&format!("/api/v1/tokens/{id}"), &app.admin)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_refused(&app, &token, "abcdefghijkl").await;
}

#[tokio::test]
async fn bad_token_requests_name_the_field() {
    let (app, (alice, token)) = App::with_account("alice").await;
    let path = tokens_path(&alice);
    for (body, field) in [
        (json!({ "name": "" }), "name"),
        (json!({ "name": "x".repeat(65) }), "name"),
        (json!({}), "name"),
        (
            json!({ "name": "short", "expiresInSeconds": 10 }),
            "expiresInSeconds",
        ),
        (
            json!({ "name": "long", "expiresInSeconds": 400_000_000 }),
            "expiresInSeconds",
        ),
    ] {
        app.post(&path, &token, body).await.assert_invalid(field);
    }
    app.delete("/api/v1/tokens/..", &token)
        .await
        .assert_invalid("token_id");
}

/// A sign-in with `token` and the CSRF header.
async fn sign_in_with(app: &App, token: &str) -> Resp {
    let body = Some(json!({ "token": token }));
    let req = request(Method::POST, "/api/v1/session", None, body);
    app.send(with_header(req, "x-stockade-csrf", "1")).await
}

/// Opens a dashboard session with `token`: the cookie to send.
async fn sign_in(app: &App, token: &str) -> String {
    let r = sign_in_with(app, token).await;
    assert!(r.status.is_success(), "{} {}", r.status, r.body);
    let cookie = r.headers["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

async fn me_with_cookie(app: &App, cookie: &str) -> Resp {
    app.get_with("/api/v1/me", "cookie", cookie).await
}

#[tokio::test]
async fn revoking_a_token_ends_the_sessions_opened_with_it() {
    let (app, (alice, first)) = App::with_account("alice").await;
    let (id, token) = new_token(&app, &first, &alice, "browser").await;
    let cookie = sign_in(&app, &token).await;
    let r = me_with_cookie(&app, &cookie).await;
    assert_eq!(r.body["account"]["name"], "alice", "{}", r.body);
    // The cookie holds the session's own secret, not the API token.
    assert!(!cookie.contains(&token), "{cookie}");
    let r = app.delete(&format!("/api/v1/tokens/{id}"), &first).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    me_with_cookie(&app, &cookie)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn signing_in_needs_the_csrf_header_and_a_valid_token() {
    let app = App::new().await;
    let r = app
        .send(request(
            Method::POST,
            "/api/v1/session",
            None,
            Some(json!({ "token": app.admin })),
        ))
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "forbidden");
    sign_in_with(&app, "stk_wrong")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn a_disabled_accounts_tokens_get_403_until_it_is_enabled() {
    let (app, (alice, token)) = App::with_account("alice").await;
    let sandbox = app.create_id(&token, json!({})).await;
    let r = app.account_act(&app.admin, &alice, "disable").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body["disabledAt"].is_string(), "{}", r.body);
    let r = app.get("/api/v1/sandbox", &token).await;
    r.assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert!(r.message().contains("disabled"), "{}", r.body);
    // Its sandbox is left as it is.
    let r = app
        .get(&format!("/api/v1/sandbox/{sandbox}"), &app.admin)
        .await;
    assert_ne!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = app.account_act(&app.admin, &alice, "enable").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = app.get(&format!("/api/v1/sandbox/{sandbox}"), &token).await;
    assert_eq!(r.body["status"], "RUNNING", "{}", r.body);
}

#[tokio::test]
async fn only_admins_disable_accounts_and_not_their_own() {
    let (app, (alice, token)) = App::with_account("alice").await;
    app.account_act(&token, &alice, "disable")
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    let admin_id = app.get("/api/v1/me", &app.admin).await.body["account"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.account_act(&app.admin, &admin_id, "disable")
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    assert_eq!(app.get("/api/v1/me", &token).await.status, StatusCode::OK);
}

#[tokio::test]
async fn only_admins_manage_accounts() {
    let app = App::new().await;
    let carol = app.tenant("carol").await;
    let me = app.get("/api/v1/me", &carol).await;
    assert_eq!(me.body["account"]["isAdmin"], false);
    app.post("/api/v1/accounts", &carol, json!({ "name": "mallory" }))
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    app.get("/api/v1/accounts", &carol)
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    app.post("/api/v1/accounts", &app.admin, json!({ "name": "carol" }))
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    app.post("/api/v1/accounts", &app.admin, json!({ "name": "" }))
        .await
        .assert_invalid("name");
    app.post(
        "/api/v1/accounts",
        &app.admin,
        json!({ "name": "x", "isAdmin": "yes" }),
    )
    .await
    .assert_invalid("isAdmin");
}
