//! How optional fields go over the wire: which ones are left out when
//! absent and which are written as `null`, that a missing one reads back as
//! absent, and that requests which refuse unknown fields still do.

use chrono::{TimeZone, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use stockade_api::e2b::{E2bForkResult, E2bNewSandbox, E2bSandbox};
use stockade_api::prime::{PrimeCheckpoint, PrimeStatusSnapshot};
use stockade_api::*;

/// Writes `value`, checks that the JSON is `expected`, and reads it back to
/// the same JSON.
fn round_trip<T: Serialize + DeserializeOwned>(value: &T, expected: Value) {
    let written = serde_json::to_value(value).unwrap();
    assert_eq!(written, expected);
    let back: T = serde_json::from_value(written.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), written);
}

/// Reads `json` as a `T` and writes it again.
fn reread<T: Serialize + DeserializeOwned>(json: Value) -> Value {
    serde_json::to_value(serde_json::from_value::<T>(json).unwrap()).unwrap()
}

fn refuses<T: DeserializeOwned>(json: Value) -> bool {
    serde_json::from_value::<T>(json).is_err()
}

#[test]
fn absent_request_fields_are_left_out_and_read_back_absent() {
    round_trip(&CreateSandboxRequest::default(), json!({}));
    round_trip(
        &CreateSandboxRequest {
            name: Some("a".into()),
            memory_gb: Some(2.0),
            disk_size_gb: Some(5.0),
            network_policy: Some(json!("deny-all")),
            ..Default::default()
        },
        json!({"name": "a", "memoryGB": 2.0, "diskSizeGB": 5.0, "networkPolicy": "deny-all"}),
    );
    round_trip(&ExecRequest::default(), json!({"background": false}));
    round_trip(
        &ExecRequest {
            shell: Some("ls".into()),
            timeout_seconds: Some(5),
            ..Default::default()
        },
        json!({"shell": "ls", "timeoutSeconds": 5, "background": false}),
    );
    round_trip(&UpdateSandboxRequest::default(), json!({}));
    round_trip(
        &UpdateSandboxRequest {
            memory_gb: Some(1.0),
            ..Default::default()
        },
        json!({"memoryGB": 1.0}),
    );
    round_trip(&HostCapacityInput::default(), json!({}));
    round_trip(
        &CreateHostRequest {
            name: "h".into(),
            docker_host: "unix:///s".into(),
            capacity: Some(HostCapacityInput {
                cpus: None,
                memory_gb: Some(1.5),
            }),
            ..Default::default()
        },
        json!({"name": "h", "dockerHost": "unix:///s", "capacity": {"memoryGB": 1.5}}),
    );
    round_trip(&UpdateHostRequest::default(), json!({}));
    round_trip(
        &UpdateHostRequest {
            address: Some(None),
            ..Default::default()
        },
        json!({"address": null}),
    );
}

#[test]
fn requests_still_refuse_unknown_fields() {
    let unknown = || json!({"privileged": true});
    assert!(refuses::<CreateSandboxRequest>(unknown()));
    assert!(refuses::<CreateSandboxBody>(unknown()));
    assert!(refuses::<ExecRequest>(unknown()));
    assert!(refuses::<UpdateSandboxRequest>(unknown()));
    assert!(refuses::<HostCapacityInput>(unknown()));
    assert!(refuses::<CreateHostRequest>(
        json!({"name": "h", "dockerHost": "unix:///s", "privileged": true})
    ));
    assert!(refuses::<SetQuotaRequest>(unknown()));
    assert!(refuses::<AuthTokenRequest>(unknown()));
    assert!(refuses::<CreateSnapshotRequest>(unknown()));
    assert!(refuses::<CreateTokenRequest>(
        json!({"name": "ci", "privileged": true})
    ));
}

#[test]
fn absent_answer_fields_are_left_out() {
    let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
    round_trip(
        &SandboxHostState {
            state: "active".into(),
            healthy: None,
            reason: None,
        },
        json!({"state": "active"}),
    );
    round_trip(
        &VolumeSummary::new("v".into(), None),
        json!({"name": "v", "mountPath": "/workspace"}),
    );
    round_trip(
        &LeaderHealth {
            instance: "i".into(),
            is_leader: true,
            holder: None,
            expires_at: None,
        },
        json!({"instance": "i", "isLeader": true}),
    );
    round_trip(
        &DockerHealth {
            status: "unhealthy".into(),
            version: None,
            api_version: None,
            os: None,
            arch: None,
            runtimes: vec![],
            error: Some("down".into()),
            troubleshooting: vec![],
        },
        json!({"status": "unhealthy", "error": "down"}),
    );
    round_trip(
        &DiskAreaHealth {
            enforced: false,
            method: None,
            reason: None,
        },
        json!({"enforced": false}),
    );
    round_trip(
        &EgressHealth {
            status: "running".into(),
            proxy: None,
            dns: None,
            reason: None,
        },
        json!({"status": "running"}),
    );
    round_trip(&DiskUsageSummary::default(), json!({}));
    round_trip(
        &E2bForkResult {
            sandbox: None,
            error: None,
        },
        json!({}),
    );
    round_trip(
        &ErrorDetail {
            code: "c".into(),
            message: "m".into(),
            details: None,
        },
        json!({"code": "c", "message": "m"}),
    );
    round_trip(
        &SnapshotResponse {
            id: "s".into(),
            name: "n".into(),
            account_id: "a".into(),
            source_sandbox_id: "b".into(),
            status: "READY".into(),
            image: "img".into(),
            workspace_bytes: None,
            workspace_size: None,
            workspace_key: None,
            created_at: at,
            deleted_at: None,
        },
        json!({"id": "s", "name": "n", "accountId": "a", "sourceSandboxId": "b",
               "status": "READY", "image": "img", "createdAt": "2026-01-02T03:04:05Z"}),
    );
    // A running process has no exit code yet, and says so with `null`.
    round_trip(
        &ProcessResponse {
            process_id: "p".into(),
            sandbox_id: "s".into(),
            command: vec!["sleep".into()],
            status: ProcessStatus::Running,
            exit_code: None,
            started_at: at,
            finished_at: None,
            duration_ms: 1,
            stdout: None,
            stderr: None,
            truncated: false,
            message: None,
        },
        json!({"processId": "p", "sandboxId": "s", "command": ["sleep"],
               "status": "running", "exitCode": null, "startedAt": "2026-01-02T03:04:05Z",
               "durationMs": 1, "truncated": false}),
    );
}

#[test]
fn fields_documented_as_null_are_still_written() {
    round_trip(
        &QuotaLimits::default(),
        json!({"sandboxes": null, "cpuCores": null, "memoryGB": null, "diskGB": null,
               "snapshots": null, "snapshotGB": null, "uploads": null, "uploadGB": null,
               "volumes": null, "volumeGB": null}),
    );
    round_trip(
        &E2bSandbox {
            template_id: "base".into(),
            sandbox_id: "s".into(),
            client_id: "c".into(),
            envd_version: "v".into(),
            envd_access_token: "t".into(),
            traffic_access_token: "p".into(),
            domain: None,
        },
        json!({"templateID": "base", "sandboxID": "s", "clientID": "c", "envdVersion": "v",
               "envdAccessToken": "t", "trafficAccessToken": "p", "domain": null}),
    );
    round_trip(
        &ExecExitEvent {
            exit_code: None,
            timed_out: true,
            duration_ms: 3,
            message: None,
        },
        json!({"exitCode": null, "timedOut": true, "durationMs": 3}),
    );
}

#[test]
fn missing_optional_fields_read_as_absent() {
    let unlimited = json!({"sandboxes": null, "cpuCores": null, "memoryGB": null,
        "diskGB": null, "snapshots": null, "snapshotGB": null, "uploads": null, "uploadGB": null,
        "volumes": null, "volumeGB": null});
    assert_eq!(reread::<QuotaLimits>(json!({})), unlimited);
    assert_eq!(reread::<SetQuotaRequest>(json!({})), unlimited);
    let new: E2bNewSandbox = serde_json::from_value(json!({"templateID": "base"})).unwrap();
    assert_eq!(
        new,
        E2bNewSandbox {
            template_id: "base".into(),
            ..Default::default()
        }
    );
    let body: CreateSandboxBody = serde_json::from_value(json!({})).unwrap();
    assert!(body.name.is_none() && body.volumes.is_none() && body.start_command.is_none());
    assert_eq!(
        reread::<PrimeStatusSnapshot>(json!({"sandbox_id": "a", "status": "RUNNING"})),
        json!({"sandbox_id": "a", "status": "RUNNING", "error_type": null, "error_message": null})
    );
    let checkpoint = json!({"id": "c", "sandbox_id": "s", "state": "DURABLE", "depth": 1,
        "docker_image": "i", "created_at": "2026-01-02T03:04:05Z",
        "updated_at": "2026-01-02T03:04:05Z"});
    assert_eq!(
        reread::<PrimeCheckpoint>(checkpoint)["stored_bytes"],
        Value::Null
    );
    let volume = reread::<VolumeResponse>(
        json!({"name": "v", "sandboxId": "s", "inUse": false, "orphaned": true}),
    );
    assert_eq!(volume["accountId"], Value::Null);
    assert!(volume.get("warning").is_none());
    let token = reread::<CreateTokenRequest>(json!({"name": "ci"}));
    assert_eq!(token, json!({"name": "ci", "expiresInSeconds": null}));
    let logs = reread::<LogsResponse>(
        json!({"sandboxId": "s", "lines": [], "hasMore": false, "truncated": false}),
    );
    assert!(logs.get("lastEventId").is_none());
    assert_eq!(logs["logs"], "");
}
