//! Credentials that can be revoked, as a tenant, a team member and an
//! administrator see them: API tokens made, listed and revoked; dashboard
//! sessions that live on the server; accounts disabled and enabled; and
//! sandbox tokens that end when their holder loses access or the sandbox
//! starts again. Each refusal is checked within a second of the change.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;

/// How soon a revocation must be in force.
const WITHIN: Duration = Duration::from_secs(1);

async fn account_id(app: &TestApp, token: &str) -> String {
    let me = app.get("/api/v1/me", token).await;
    assert_eq!(me.status, StatusCode::OK, "{:?}", me.body);
    me.body["account"]["id"].as_str().unwrap().to_owned()
}

/// `GET /e2b/sandboxes` with an E2B API key.
async fn e2b_list(app: &TestApp, key: &str) -> StatusCode {
    get_status_with(app, "/e2b/sandboxes", "X-API-Key", key).await
}

/// The status of `GET path` with one header and no bearer token.
async fn get_status_with(app: &TestApp, path: &str, name: &str, value: &str) -> StatusCode {
    let req = app.http.get(format!("{}{path}", app.base));
    req.header(name, value).send().await.unwrap().status()
}

/// Signs the dashboard in; the session cookie's `name=value`.
pub async fn sign_in(app: &TestApp, token: &str) -> String {
    let r = app
        .http
        .post(format!("{}/api/v1/session", app.base))
        .header("X-Stockade-CSRF", "1")
        .json(&json!({ "token": token }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    cookie.split(';').next().unwrap().to_owned()
}

async fn me_with_cookie(app: &TestApp, cookie: &str) -> StatusCode {
    get_status_with(app, "/api/v1/me", "Cookie", cookie).await
}

/// Waits (at most `WITHIN`) until `check` gives `want`; the last answer.
async fn within<F, Fut>(want: StatusCode, mut check: F) -> StatusCode
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StatusCode>,
{
    let start = Instant::now();
    loop {
        let got = check().await;
        if got == want || start.elapsed() > WITHIN {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn api_tokens_are_made_listed_and_revoked() {
    let (app, [alice, mallory]) = spawn_with_accounts(["alice-tokens", "mallory-tokens"]).await;
    let alice_id = account_id(&app, &alice).await;
    let path = format!("/api/v1/accounts/{alice_id}/tokens");

    // Every field is checked and named.
    for (body, field) in [
        (json!({ "name": "" }), "name"),
        (json!({ "name": "x".repeat(65) }), "name"),
        (
            json!({ "name": "ci", "expiresInSeconds": 5 }),
            "expiresInSeconds",
        ),
        (
            json!({ "name": "ci", "expiresInSeconds": -1 }),
            "expiresInSeconds",
        ),
        (json!({ "name": "ci", "accountId": "x" }), "accountId"),
        (json!({}), "name"),
    ] {
        let r = app.post(&path, &alice, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert_eq!(r.error_fields(), vec![field], "{body}");
    }
    let r = app
        .post(
            &path,
            &alice,
            json!({ "name": "ci", "expiresInSeconds": 3600 }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let ci = r.body["token"].as_str().unwrap().to_owned();
    let ci_id = r.body["id"].as_str().unwrap().to_owned();
    assert!(ci.starts_with("stk_"), "{ci}");
    assert!(r.body["expiresAt"].is_string(), "{:?}", r.body);

    // It works on the API and on E2B's.
    assert_eq!(app.get("/api/v1/me", &ci).await.status, StatusCode::OK);
    assert_eq!(e2b_list(&app, &ci).await, StatusCode::OK);

    // Listed without its secret, with its last use.
    let mut listed = Value::Null;
    for _ in 0..50 {
        let r = app.get(&path, &alice).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        listed = r.body;
        let used = listed["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == ci_id.as_str() && t["lastUsedAt"].is_string());
        if used {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!listed.to_string().contains(&ci), "{listed}");
    let names = str_list(&listed["tokens"], "name");
    assert_eq!(names.len(), 2, "{listed}");
    assert!(names.contains(&"ci"), "{listed}");
    assert!(
        listed["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == ci_id.as_str() && t["lastUsedAt"].is_string()),
        "{listed}"
    );

    // Another tenant can neither see, make nor revoke them.
    assert_eq!(app.get(&path, &mallory).await.status, StatusCode::FORBIDDEN);
    let r = app.post(&path, &mallory, json!({ "name": "mine" })).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = app
        .delete(&format!("/api/v1/tokens/{ci_id}"), &mallory)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    assert_eq!(app.get("/api/v1/me", &ci).await.status, StatusCode::OK);
    let r = app.delete("/api/v1/tokens/NOT-AN-ID", &alice).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);

    // Revoked: refused on both APIs within a second; the other token stays.
    let r = app.delete(&format!("/api/v1/tokens/{ci_id}"), &alice).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let got = within(StatusCode::UNAUTHORIZED, || async {
        app.get("/api/v1/me", &ci).await.status
    })
    .await;
    assert_eq!(got, StatusCode::UNAUTHORIZED);
    let got = within(StatusCode::UNAUTHORIZED, || e2b_list(&app, &ci)).await;
    assert_eq!(got, StatusCode::UNAUTHORIZED);
    assert_eq!(app.get("/api/v1/me", &alice).await.status, StatusCode::OK);
    let r = app.delete(&format!("/api/v1/tokens/{ci_id}"), &alice).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    // An administrator manages any account's tokens.
    let r = app
        .post(&path, &app.admin_token, json!({ "name": "by-admin" }))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = app
        .delete(
            &format!("/api/v1/tokens/{}", r.body["id"].as_str().unwrap()),
            &app.admin_token,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
}

#[tokio::test]
async fn dashboard_sessions_live_on_the_server() {
    let app = spawn_app().await;
    let alice = app.new_account("alice-sessions").await;
    let alice_id = account_id(&app, &alice).await;
    let path = format!("/api/v1/accounts/{alice_id}/tokens");
    let made = app.post(&path, &alice, json!({ "name": "laptop" })).await;
    let laptop = made.body["token"].as_str().unwrap().to_owned();
    let laptop_id = made.body["id"].as_str().unwrap().to_owned();

    // Over HTTPS the cookie is a `__Host-` one: Secure, for the whole host.
    let r = app
        .http
        .post(format!("{}/api/v1/session", app.base))
        .header("X-Stockade-CSRF", "1")
        .header("X-Forwarded-Proto", "https")
        .json(&json!({ "token": laptop }))
        .send()
        .await
        .unwrap();
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("__Host-stockade_session=stks_"), "{set}");
    for attr in ["Secure", "Path=/;", "HttpOnly", "SameSite=Strict"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.contains("Domain"), "{set}");
    let host_cookie = set.split(';').next().unwrap().to_owned();
    assert_eq!(me_with_cookie(&app, &host_cookie).await, StatusCode::OK);

    let cookie = sign_in(&app, &laptop).await;
    let secret = cookie.split_once('=').unwrap().1.to_owned();
    // The cookie holds a session, never the API token.
    assert!(secret.starts_with("stks_"), "{cookie}");
    assert!(!cookie.contains(&laptop), "{cookie}");
    assert_eq!(me_with_cookie(&app, &cookie).await, StatusCode::OK);
    // A session's secret is no API token, and an API token no session.
    let r = app.get("/api/v1/me", &secret).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.body);
    let planted = format!("stockade_session={laptop}");
    assert_eq!(
        me_with_cookie(&app, &planted).await,
        StatusCode::UNAUTHORIZED
    );
    // Listed as a session of the token it was opened with.
    let listed = app.get(&path, &alice).await.body;
    let session = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "session")
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    assert_eq!(session["parentId"], laptop_id.as_str(), "{listed}");
    assert!(session["expiresAt"].is_string(), "{listed}");

    // Signing out ends it on the server: the same cookie again is refused.
    let r = app
        .http
        .delete(format!("{}/api/v1/session", app.base))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        me_with_cookie(&app, &cookie).await,
        StatusCode::UNAUTHORIZED
    );

    // Revoking the API token ends the sessions opened with it.
    let cookie = sign_in(&app, &laptop).await;
    assert_eq!(me_with_cookie(&app, &cookie).await, StatusCode::OK);
    let r = app
        .delete(&format!("/api/v1/tokens/{laptop_id}"), &alice)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let got = within(StatusCode::UNAUTHORIZED, || me_with_cookie(&app, &cookie)).await;
    assert_eq!(got, StatusCode::UNAUTHORIZED);

    // A session can be ended from the list, like a token.
    let cookie = sign_in(&app, &alice).await;
    let listed = app.get(&path, &alice).await.body;
    let sid = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "session")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = app.delete(&format!("/api/v1/tokens/{sid}"), &alice).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(
        me_with_cookie(&app, &cookie).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_disabled_account_is_refused_everywhere_until_enabled() {
    let (app, [bob, carol]) = spawn_with_accounts(["bob-disabled", "carol-disabled"]).await;
    let bob_id = account_id(&app, &bob).await;
    let admin_id = account_id(&app, &app.admin_token).await;
    let sid = app.create_id(&bob, json!({ "name": "kept" })).await;
    let cookie = sign_in(&app, &bob).await;
    let port_token = app.port_token(&bob, &sid).await;

    // Only administrators disable, and never themselves.
    let disable = format!("/api/v1/accounts/{bob_id}/disable");
    let r = app.post(&disable, &carol, json!({})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = app
        .account_act(&app.admin_token, &admin_id, "disable")
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    let r = app
        .post(&disable, &app.admin_token, json!({ "why": "x" }))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    let r = app
        .post(
            "/api/v1/accounts/abcdefghijklmnop/disable",
            &app.admin_token,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    let r = app.post(&disable, &app.admin_token, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(r.body["disabledAt"].is_string(), "{:?}", r.body);
    let started = Instant::now();
    // Its token, its session, E2B and its sandbox token: all refused.
    let r = app.get("/api/v1/me", &bob).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert!(r.body.to_string().contains("disabled"), "{:?}", r.body);
    assert_eq!(me_with_cookie(&app, &cookie).await, StatusCode::FORBIDDEN);
    assert_eq!(e2b_list(&app, &bob).await, StatusCode::FORBIDDEN);
    let r = app
        .call(
            Method::GET,
            &format!("/proxy/{sid}/8080/?stockade_token={port_token}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert!(started.elapsed() < WITHIN * 5);
    // The administrator's list shows it disabled.
    let accounts = app.get("/api/v1/accounts", &app.admin_token).await.body;
    let listed = accounts["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == bob_id.as_str())
        .unwrap()
        .clone();
    assert!(listed["disabledAt"].is_string(), "{listed}");

    // Enabled: everything works again.
    let r = app.account_act(&app.admin_token, &bob_id, "enable").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(r.body.get("disabledAt").is_none(), "{:?}", r.body);
    assert_eq!(app.get("/api/v1/me", &bob).await.status, StatusCode::OK);
    assert_eq!(me_with_cookie(&app, &cookie).await, StatusCode::OK);
    assert_eq!(e2b_list(&app, &bob).await, StatusCode::OK);
    // Its sandbox was left as it was.
    let r = app.get(&format!("/api/v1/sandbox/{sid}"), &bob).await;
    assert_eq!(r.body["status"], "RUNNING", "{:?}", r.body);
}

/// An in-sandbox (envd) call with an access token: the status.
async fn envd_read(app: &TestApp, sandbox: &str, token: &str) -> StatusCode {
    app.http
        .get(format!("{}/e2b/files?path=/etc/hostname", app.base))
        .header("E2b-Sandbox-Id", sandbox)
        .header("E2b-Sandbox-Port", "49983")
        .header("X-Access-Token", token)
        .send()
        .await
        .unwrap()
        .status()
}

/// E2B's connect: the sandbox's access tokens for the caller.
async fn connect(app: &TestApp, key: &str, sandbox: &str) -> (String, String) {
    let r = app
        .http
        .post(format!("{}/e2b/sandboxes/{sandbox}/connect", app.base))
        .header("X-API-Key", key)
        .json(&json!({ "timeout": 600 }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert!(status.is_success(), "{status} {body}");
    (
        body["envdAccessToken"].as_str().unwrap().to_owned(),
        body["trafficAccessToken"].as_str().unwrap().to_owned(),
    )
}

/// A request to port 8080 of a sandbox (`httpd` serving `/etc`) with an
/// E2B traffic token.
async fn traffic(app: &TestApp, sandbox: &str, token: &str) -> StatusCode {
    app.http
        .get(format!("{}/proxy/{sandbox}/8080/hostname", app.base))
        .header("e2b-traffic-access-token", token)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn sandbox_tokens_end_with_team_membership_and_with_the_run() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice-team-tokens", "bob-team-tokens"]).await;
    let bob_id = account_id(&app, &bob).await;
    let alice_id = account_id(&app, &alice).await;
    let team_id = app.new_team("shared-tokens").await;
    for member in [&bob_id, &alice_id] {
        let r = app.add_member(&team_id, member).await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    let sid = app
        .create_id(
            &alice,
            json!({
                "name": "team-box",
                "teamId": team_id,
                "persistent": true,
                "ports": [8080],
                "startCommand": "exec httpd -f -p 8080 -h /etc",
            }),
        )
        .await;

    let (alice_envd, alice_traffic) = connect(&app, &alice, &sid).await;
    let (bob_envd, bob_traffic) = connect(&app, &bob, &sid).await;
    assert_ne!(alice_envd, bob_envd, "each holder gets a token of its own");
    assert_eq!(envd_read(&app, &sid, &bob_envd).await, StatusCode::OK);
    assert_eq!(envd_read(&app, &sid, &alice_envd).await, StatusCode::OK);
    assert_eq!(traffic(&app, &sid, &bob_traffic).await, StatusCode::OK);
    // Forged or altered tokens open nothing.
    let forged = format!("{}x", &bob_envd[..bob_envd.len() - 1]);
    assert_eq!(
        envd_read(&app, &sid, &forged).await,
        StatusCode::UNAUTHORIZED
    );

    // Bob leaves the team: his tokens are refused within a second, Alice's
    // keep working.
    let r = app
        .delete(
            &format!("/api/v1/teams/{team_id}/members/{bob_id}"),
            &app.admin_token,
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let got = within(StatusCode::FORBIDDEN, || envd_read(&app, &sid, &bob_envd)).await;
    assert_eq!(got, StatusCode::FORBIDDEN);
    let got = within(StatusCode::FORBIDDEN, || traffic(&app, &sid, &bob_traffic)).await;
    assert_eq!(got, StatusCode::FORBIDDEN);
    assert_eq!(envd_read(&app, &sid, &alice_envd).await, StatusCode::OK);
    assert_eq!(traffic(&app, &sid, &alice_traffic).await, StatusCode::OK);

    // A stop and a start end the tokens of the run before; new ones work.
    let r = app.act(&alice, &sid, "stop").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.act(&alice, &sid, "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        envd_read(&app, &sid, &alice_envd).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        traffic(&app, &sid, &alice_traffic).await,
        StatusCode::UNAUTHORIZED
    );
    let (envd, traffic_token) = connect(&app, &alice, &sid).await;
    assert_eq!(envd_read(&app, &sid, &envd).await, StatusCode::OK);
    let reached = eventually(Duration::from_secs(10), || async {
        traffic(&app, &sid, &traffic_token).await == StatusCode::OK
    })
    .await;
    assert!(
        reached.is_some(),
        "the new traffic token never reached the port"
    );
}

/// The bad day: the server stops and starts again (a crash or an upgrade).
/// What was revoked stays revoked, what was disabled stays disabled, and
/// what was valid stays valid: sessions, API tokens, and the envd token of
/// a sandbox that kept running through the restart.
#[tokio::test(flavor = "multi_thread")]
async fn credentials_and_revocations_survive_a_restart() {
    let first = spawn_kept_app().await;
    let alice = first.new_account("alice-restart").await;
    let bob = first.new_account("bob-restart").await;
    let alice_id = account_id(&first, &alice).await;
    let bob_id = account_id(&first, &bob).await;
    let made = first
        .post(
            &format!("/api/v1/accounts/{alice_id}/tokens"),
            &alice,
            json!({ "name": "revoked-before" }),
        )
        .await;
    let revoked = made.body["token"].as_str().unwrap().to_owned();
    let r = first
        .delete(
            &format!("/api/v1/tokens/{}", made.body["id"].as_str().unwrap()),
            &alice,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let cookie = sign_in(&first, &alice).await;
    let r = first
        .account_act(&first.admin_token, &bob_id, "disable")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let sid = first
        .create_id(&alice, json!({ "name": "kept-tokens", "persistent": true }))
        .await;
    let (envd, _) = connect(&first, &alice, &sid).await;
    assert_eq!(envd_read(&first, &sid, &envd).await, StatusCode::OK);
    let second = first.restart().await;
    assert_eq!(
        second.get("/api/v1/me", &revoked).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        second.get("/api/v1/me", &alice).await.status,
        StatusCode::OK
    );
    assert_eq!(me_with_cookie(&second, &cookie).await, StatusCode::OK);
    assert_eq!(
        second.get("/api/v1/me", &bob).await.status,
        StatusCode::FORBIDDEN
    );
    let read = eventually(Duration::from_secs(10), || async {
        envd_read(&second, &sid, &envd).await == StatusCode::OK
    })
    .await;
    assert!(read.is_some(), "the sandbox's run went on: its token too");
}
