//! Temporary listing benchmark (not to be committed).
use chrono::{SubsecRound, Utc};
use std::sync::Arc;
use std::time::Instant;
use stockade_core::spec::SpecInput;
use stockade_core::*;
use stockade_store::*;

async fn fill(store: &Arc<dyn Store>) -> (Scope, Scope) {
    let a = store.create_account("perf-a", false).await.unwrap();
    let b = store.create_account("perf-b", false).await.unwrap();
    let t0 = Utc::now().trunc_subsecs(6);
    let mut handles = vec![];
    for chunk in 0..8 {
        let store = store.clone();
        let (a, b) = (a.id.clone(), b.id.clone());
        handles.push(tokio::spawn(async move {
            for i in (chunk..20000).step_by(8) {
                let acct = if i % 2 == 0 { &a } else { &b };
                let id = SandboxId::generate();
                let labels = vec![
                    if i % 4 < 2 {
                        "env=prod".to_string()
                    } else {
                        "env=dev".to_string()
                    },
                    format!("n={}", i % 10),
                    "common".into(),
                ];
                let spec = SandboxSpec::from_input(
                    SpecInput {
                        name: Some(format!("sb-{i}")),
                        labels: Some(labels),
                        ..Default::default()
                    },
                    &id,
                    &Defaults::default(),
                )
                .unwrap();
                let mut sb = Sandbox::new(
                    id.clone(),
                    acct.clone(),
                    None,
                    spec,
                    "local".into(),
                    t0 + chrono::Duration::milliseconds(i as i64),
                );
                sb.status = if i % 10 == 0 {
                    SandboxStatus::Terminated
                } else {
                    SandboxStatus::Running
                };
                store.insert_sandbox(&sb).await.unwrap();
                if i % 20 == 0 {
                    store.soft_delete_sandbox(&id, Utc::now()).await.unwrap();
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    (Scope::account(a.id), Scope::account(b.id))
}

async fn bench(store: Arc<dyn Store>) {
    let t = Instant::now();
    let scope = if store.count_accounts().await.unwrap() == 0 {
        fill(&store).await.0
    } else {
        Scope::account(
            store
                .list_accounts()
                .await
                .unwrap()
                .into_iter()
                .find(|a| a.name == "perf-a")
                .unwrap()
                .id,
        )
    };
    eprintln!("[{}] filled 20000 in {:?}", store.backend(), t.elapsed());
    let lab = |l: &[&str]| {
        l.iter()
            .map(|s| Label::parse_field(s, "l").unwrap())
            .collect::<Vec<_>>()
    };
    let cases: Vec<(&str, SandboxFilter)> = vec![
        (
            "default",
            SandboxFilter {
                page: 1,
                per_page: 50,
                ..Default::default()
            },
        ),
        (
            "page 100",
            SandboxFilter {
                page: 100,
                per_page: 50,
                ..Default::default()
            },
        ),
        (
            "label env=prod",
            SandboxFilter {
                page: 1,
                per_page: 50,
                labels: lab(&["env=prod"]),
                ..Default::default()
            },
        ),
        (
            "labels env=prod,n=4",
            SandboxFilter {
                page: 1,
                per_page: 50,
                labels: lab(&["env=prod", "n=4"]),
                ..Default::default()
            },
        ),
        (
            "labels common",
            SandboxFilter {
                page: 1,
                per_page: 50,
                labels: lab(&["common"]),
                ..Default::default()
            },
        ),
        (
            "status RUNNING",
            SandboxFilter {
                page: 1,
                per_page: 50,
                statuses: vec![SandboxStatus::Running],
                ..Default::default()
            },
        ),
        (
            "is_active=false",
            SandboxFilter {
                page: 1,
                per_page: 50,
                is_active: Some(false),
                ..Default::default()
            },
        ),
        (
            "status TERMINATED",
            SandboxFilter {
                page: 1,
                per_page: 50,
                statuses: vec![SandboxStatus::Terminated],
                ..Default::default()
            },
        ),
        (
            "name",
            SandboxFilter {
                page: 1,
                per_page: 50,
                name: Some("sb-1000".into()),
                ..Default::default()
            },
        ),
    ];
    for (what, f) in cases {
        let mut times = vec![];
        let mut total = 0;
        for _ in 0..40 {
            let t = Instant::now();
            let p = store.list_sandboxes(&scope, &f).await.unwrap();
            times.push(t.elapsed());
            total = p.total;
        }
        times.sort();
        eprintln!(
            "[{}] {what:>22}: total {total:>5} p50 {:?} p90 {:?}",
            store.backend(),
            times[20],
            times[36]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn perf_sqlite() {
    let store = connect("sqlite:///tmp/perf/p.db").await.unwrap();
    bench(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn perf_pg() {
    let url = std::env::var("PERF_PG").unwrap();
    bench(connect(&url).await.unwrap()).await;
}
