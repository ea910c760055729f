//! Account quotas through the SDK: an administrator sets and reads
//! them, the account reads its own, bad values fail before any request, and
//! a create over the quota is an `Error::Api` with `quota_exceeded`.

use stockade_sdk::api::SetQuotaRequest;
use stockade_sdk::{Client, CreateParams, Error, Sandbox};

use crate::helpers::server;

#[tokio::test(flavor = "multi_thread")]
async fn quotas_are_set_read_and_enforced() {
    let s = server().await;
    let dora = s.client.create_account("dora", false).await.unwrap();
    let id = dora.account.id.clone();
    let client = Client::new(s.client.base_url(), dora.token).unwrap();

    let q = client.quota(&id).await.unwrap();
    assert_eq!(q.account_id, id);
    assert_eq!(q.quota.sandboxes, None);
    assert_eq!(q.usage.sandboxes, 0);

    let want = SetQuotaRequest {
        sandboxes: Some(1),
        memory_gb: Some(2.0),
        ..Default::default()
    };
    let q = s.client.set_quota(&id, &want).await.unwrap();
    assert_eq!(q.quota.to_request(), want);
    // Only an administrator sets a quota.
    let err = client.set_quota(&id, &want).await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");

    // Bad values and ids are refused before a request, naming the field.
    let bad = SetQuotaRequest {
        cpu_cores: Some(f64::NAN),
        ..Default::default()
    };
    match s.client.set_quota(&id, &bad).await.unwrap_err() {
        Error::InvalidParams { field, .. } => assert_eq!(field, "cpuCores"),
        other => panic!("{other:?}"),
    }
    match s.client.quota("../me").await.unwrap_err() {
        Error::InvalidParams { field, .. } => assert_eq!(field, "account_id"),
        other => panic!("{other:?}"),
    }

    let params = || CreateParams::new().cpu_cores(0.25).memory_gb(0.5);
    let sb = Sandbox::create(&client, params().name("first"))
        .await
        .unwrap();
    let err = Sandbox::create(&client, params().name("second"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("quota_exceeded"), "{err}");
    assert_eq!(err.status(), Some(403));
    assert!(
        err.to_string()
            .starts_with("account quota exceeded: 1 of 1 sandboxes"),
        "{err}"
    );
    let q = client.quota(&id).await.unwrap();
    assert_eq!(q.usage.sandboxes, 1);
    assert_eq!(q.usage.memory_gb, 0.5);
    sb.delete().await.unwrap();
    assert_eq!(s.containers(), 0);
}
