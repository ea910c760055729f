//! API tokens, dashboard sessions and disabled accounts through the SDK: an
//! account makes, lists and revokes its own tokens (the secret only in the
//! create answer), a revoked token is refused at once, an administrator
//! manages another account's tokens and disables and enables the account,
//! and bad ids fail before any request.

use std::time::Duration;

use stockade_sdk::{Client, Error};

use crate::helpers::server;

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_made_listed_and_revoked_and_accounts_disabled() {
    let s = server().await;
    let erin = s.client.create_account("erin", false).await.unwrap();
    let id = erin.account.id.clone();
    let erin_client = Client::new(s.client.base_url(), &erin.token).unwrap();

    // A token of her own, with an expiry; its secret works as a credential.
    let ci = erin_client
        .create_token(&id, "ci", Some(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(ci.name, "ci");
    assert!(ci.token.starts_with("stk_"), "{}", ci.token);
    let expires = ci.expires_at.expect("an expiry");
    assert_eq!((expires - ci.created_at).num_seconds(), 3600);
    let ci_client = Client::new(s.client.base_url(), &ci.token).unwrap();
    assert_eq!(ci_client.whoami().await.unwrap().account.id, id);

    // Listed without any secret, next to the account's first token.
    let list = erin_client.list_tokens(&id).await.unwrap();
    assert_eq!(list.tokens.len(), 2, "{:?}", list.tokens);
    let listed = list.tokens.iter().find(|t| t.id == ci.id).unwrap();
    assert_eq!(listed.name, "ci");
    assert_eq!(listed.kind, "api");
    assert_eq!(listed.expires_at, ci.expires_at);
    assert_eq!(listed.parent_id, None);
    let text = serde_json::to_string(&list).unwrap();
    assert!(!text.contains(&ci.token) && !text.contains(&erin.token));

    // Another account's tokens are an administrator's business only.
    let other = s.client.create_account("frank", false).await.unwrap();
    let err = erin_client
        .list_tokens(&other.account.id)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    let by_admin = s
        .client
        .create_token(&other.account.id, "ops", None)
        .await
        .unwrap();
    assert_eq!(by_admin.expires_at, None);
    assert!(s
        .client
        .list_tokens(&other.account.id)
        .await
        .unwrap()
        .tokens
        .iter()
        .any(|t| t.id == by_admin.id));
    // Erin cannot revoke Frank's token: for her it does not exist.
    let err = erin_client.revoke_token(&by_admin.id).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");

    // Revoked: refused on the next request, and gone from the list.
    erin_client.revoke_token(&ci.id).await.unwrap();
    let err = ci_client.whoami().await.unwrap_err();
    assert_eq!(err.status(), Some(401), "{err}");
    let list = erin_client.list_tokens(&id).await.unwrap();
    assert!(list.tokens.iter().all(|t| t.id != ci.id));

    // Checked before any request: no name, a secret where an id belongs.
    match erin_client.create_token(&id, "  ", None).await.unwrap_err() {
        Error::InvalidParams { field, .. } => assert_eq!(field, "name"),
        other => panic!("{other:?}"),
    }
    match erin_client.revoke_token(&erin.token).await.unwrap_err() {
        Error::InvalidParams { field, .. } => assert_eq!(field, "token_id"),
        other => panic!("{other:?}"),
    }
    // The server's range: a minute at least.
    let err = erin_client
        .create_token(&id, "short", Some(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    assert!(err.to_string().contains("expiresInSeconds"), "{err}");

    // Disabled: every token of the account is refused, saying so; only
    // administrators disable, and not themselves.
    let err = erin_client
        .disable_account(&other.account.id)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    let admin_id = s.client.whoami().await.unwrap().account.id;
    assert!(s
        .client
        .disable_account(&admin_id)
        .await
        .unwrap_err()
        .is_conflict());
    let disabled = s.client.disable_account(&id).await.unwrap();
    assert!(disabled.disabled_at.is_some());
    let err = erin_client.whoami().await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert!(err.to_string().contains("disabled"), "{err}");
    let listed = s.client.list_accounts().await.unwrap().accounts;
    let row = listed.iter().find(|a| a.id == id).unwrap();
    assert!(row.disabled_at.is_some());

    let enabled = s.client.enable_account(&id).await.unwrap();
    assert_eq!(enabled.disabled_at, None);
    assert_eq!(erin_client.whoami().await.unwrap().account.id, id);
}
