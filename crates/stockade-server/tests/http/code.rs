//! The code interpreter's routes without Docker: every bad field is a 400
//! naming it before the sandbox's agent is asked, another account's
//! sandbox is 403, a missing token 401, a stopped sandbox 409, and E2B's
//! port 49999 takes the same credentials as its agent's port plus the
//! sandbox's traffic token — and refuses another sandbox's.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};

use crate::support::*;

fn code_path(id: &str) -> String {
    format!("/api/v1/sandbox/{id}/code")
}

fn contexts_path(id: &str) -> String {
    format!("/api/v1/sandbox/{id}/code/contexts")
}

/// A 400 naming `field` for a cell of `body` in a running sandbox.
async fn refused_cell(body: Value, field: &str) {
    let (app, [alice]) = App::with_tenants(["alice"]).await;
    let id = app.create_id(&alice, json!({})).await;
    let r = app.post(&code_path(&id), &alice, body).await;
    r.assert_invalid(field);
}

bad_bodies! { refused_cell;
    code_is_required: json!({"language": "python"}) => "code";
    code_over_a_mebibyte: json!({"code": "x".repeat(1024 * 1024 + 1)}) => "code";
    unknown_fields_are_named: json!({"code": "1", "kernel": "python"}) => "kernel";
    language_and_context_together: json!({"code": "1", "language": "python", "contextId": "abc"}) => "contextId";
    language_and_context_name_the_language_too: json!({"code": "1", "language": "python", "contextId": "abc"}) => "language";
    empty_language: json!({"code": "1", "language": "  "}) => "language";
    context_id_not_a_segment: json!({"code": "1", "contextId": "../x"}) => "contextId";
    env_var_names: json!({"code": "1", "envVars": {"1A": "x"}}) => "envVars.1A";
    reserved_env_vars: json!({"code": "1", "envVars": {"STOCKADE_EXEC_ID": "x"}}) => "envVars.STOCKADE_EXEC_ID";
    zero_timeout: json!({"code": "1", "timeoutSeconds": 0}) => "timeoutSeconds";
    negative_timeout: json!({"code": "1", "timeoutSeconds": -1.5}) => "timeoutSeconds";
    endless_timeout: json!({"code": "1", "timeoutSeconds": 1e12}) => "timeoutSeconds";
    code_of_the_wrong_type: json!({"code": 1}) => "code";
}

#[tokio::test]
async fn bad_context_requests_name_their_field() {
    let (app, [alice]) = App::with_tenants(["alice"]).await;
    let id = app.create_id(&alice, json!({})).await;
    let r = app
        .post(&contexts_path(&id), &alice, json!({"cwd": "relative"}))
        .await;
    r.assert_invalid("cwd");
    let r = app
        .post(&contexts_path(&id), &alice, json!({"language": ""}))
        .await;
    r.assert_invalid("language");
    let r = app
        .post(&contexts_path(&id), &alice, json!({"lang": "python"}))
        .await;
    r.assert_invalid("lang");
    // A context id that is not one path segment of the agent's routes.
    let bad = format!("{}/a%2F..%2Fb/restart", contexts_path(&id));
    app.post(&bad, &alice, json!({}))
        .await
        .assert_invalid("contextId");
    let bad = format!("{}/a%20b", contexts_path(&id));
    app.delete(&bad, &alice).await.assert_invalid("contextId");
}

#[tokio::test]
async fn another_accounts_sandbox_is_403_an_unknown_one_404_and_no_token_401() {
    let (app, [alice, bob]) = App::with_tenants(["alice", "bob"]).await;
    let id = app.create_id(&alice, json!({})).await;
    let ctx = format!("{}/abc", contexts_path(&id));
    let calls = [
        (Method::POST, code_path(&id), Some(json!({"code": "1"}))),
        (Method::GET, contexts_path(&id), None),
        (Method::POST, contexts_path(&id), Some(json!({}))),
        (Method::DELETE, ctx.clone(), None),
        (Method::POST, format!("{ctx}/restart"), None),
        (Method::POST, format!("{ctx}/interrupt"), None),
    ];
    for (method, path, body) in calls {
        let r = app
            .send(request(method.clone(), &path, Some(&bob), body.clone()))
            .await;
        r.assert_error(StatusCode::FORBIDDEN, "forbidden");
        let r = app
            .send(request(method.clone(), &path, None, body.clone()))
            .await;
        r.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
        let unknown = path.replace(&id, "abcdefghijkl");
        let r = app
            .send(request(method.clone(), &unknown, Some(&alice), body))
            .await;
        r.assert_error(StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn a_stopped_sandbox_runs_no_code() {
    let (app, [alice]) = App::with_tenants(["alice"]).await;
    let id = app.create_id(&alice, json!({"persistent": true})).await;
    let r = app
        .post(&format!("/api/v1/sandbox/{id}/stop"), &alice, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = app
        .post(&code_path(&id), &alice, json!({"code": "1"}))
        .await;
    r.assert_error(StatusCode::CONFLICT, "sandbox_not_running");
    assert!(r.message().contains("/start"), "{}", r.body);
    let r = app.get(&contexts_path(&id), &alice).await;
    r.assert_error(StatusCode::CONFLICT, "sandbox_not_running");
    // Bad input is still named first.
    let r = app
        .post(
            &code_path(&id),
            &alice,
            json!({"code": "1", "timeoutSeconds": 0}),
        )
        .await;
    r.assert_invalid("timeoutSeconds");
}

/// A request to E2B's in-sandbox front door for port 49999.
fn code_call(sandbox: &str, path: &str, headers: &[(&'static str, &str)]) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header("e2b-sandbox-id", sandbox)
        .header("e2b-sandbox-port", "49999");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Body::empty()).expect("request")
}

/// An E2B sandbox of `key`'s account: its id, envd token and traffic token.
async fn e2b_sandbox(app: &App, key: &str) -> (String, String, String) {
    let r = app
        .e2b(
            Method::POST,
            "/e2b/sandboxes",
            key,
            Some(json!({"templateID": "base"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let s = |k: &str| r.body[k].as_str().unwrap_or_default().to_owned();
    let traffic = s("trafficAccessToken");
    assert!(traffic.starts_with("stkt_"), "{}", r.body);
    (s("sandboxID"), s("envdAccessToken"), traffic)
}

#[tokio::test]
async fn e2b_code_calls_take_the_sandboxs_tokens_or_its_accounts_key_and_nothing_else() {
    let (app, [alice, bob]) = App::with_tenants(["alice", "bob"]).await;
    let (id, _, _) = e2b_sandbox(&app, &alice).await;
    let (other, other_envd, other_traffic) = e2b_sandbox(&app, &alice).await;
    assert_ne!(id, other);
    let status = |r: &Resp| r.status;

    // Nothing, or another sandbox's tokens: 401.
    let r = app.send(code_call(&id, "/e2b/contexts", &[])).await;
    assert_eq!(status(&r), StatusCode::UNAUTHORIZED, "{}", r.body);
    assert!(
        r.body.to_string().contains("E2B-Traffic-Access-Token"),
        "{}",
        r.body
    );
    for (header, token) in [
        ("e2b-traffic-access-token", other_traffic.as_str()),
        ("x-access-token", other_envd.as_str()),
        ("e2b-traffic-access-token", "stkt_made_up"),
    ] {
        let r = app
            .send(code_call(&id, "/e2b/contexts", &[(header, token)]))
            .await;
        assert_eq!(status(&r), StatusCode::UNAUTHORIZED, "{header}: {}", r.body);
    }
    // Another account's key: 403.
    let r = app
        .send(code_call(&id, "/e2b/contexts", &[("x-api-key", &bob)]))
        .await;
    assert_eq!(status(&r), StatusCode::FORBIDDEN, "{}", r.body);
    // The agent's own port takes no traffic token, as before.
    let (_, _, traffic) = e2b_sandbox(&app, &alice).await;
    let req = Request::builder()
        .uri("/e2b/health")
        .header("e2b-sandbox-id", &other)
        .header("e2b-sandbox-port", "49983")
        .header("e2b-traffic-access-token", &traffic)
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.send(req).await.status, StatusCode::UNAUTHORIZED);
    // Other ports are not reached this way.
    let req = Request::builder()
        .uri("/e2b/contexts")
        .header("e2b-sandbox-id", &id)
        .header("e2b-sandbox-port", "8080")
        .header("x-api-key", &alice)
        .body(Body::empty())
        .unwrap();
    let r = app.send(req).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.to_string().contains("49999"), "{}", r.body);
}
