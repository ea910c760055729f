//! Templates in the store: names unique per account, free again after a
//! delete, found for their owner and (when public) for everyone else; builds
//! with their recipe, result and tags; logs read from an offset; the build
//! cache. Runs on SQLite and, when `STOCKADE_TEST_DATABASE_URL` is set, on
//! a fresh PostgreSQL database.

mod common;

use std::sync::Arc;

use chrono::{Duration, SubsecRound, Utc};
use stockade_core::template::{
    BuildBase, BuildLogLine, BuildRecipe, BuildStatus, BuildStep, ImageConfig, LogLevel, StepKind,
    Template, TemplateBuild, TemplateLayer, TemplateName,
};
use stockade_core::{AccountId, SandboxId};
use stockade_store::{Store, StoreError};

common::store_tests!(file "t.db", 2, sqlite_templates, postgres_templates, |store| {
    story(store).await
});

fn name(s: &str) -> TemplateName {
    TemplateName::parse_field(s, "name").unwrap()
}

fn template(account: &AccountId, names: &[&str]) -> Template {
    let mut t = Template::new(
        account.clone(),
        names.iter().map(|n| name(n)).collect(),
        Utc::now().trunc_subsecs(6),
    );
    t.cpu_count = Some(2);
    t.memory_mb = Some(1024);
    t.disk_size_gb = Some(20);
    t
}

fn recipe() -> BuildRecipe {
    BuildRecipe {
        base: BuildBase::Image("debian:bookworm".into()),
        steps: vec![
            BuildStep {
                kind: StepKind::Run {
                    command: "apt-get install -y git".into(),
                    user: None,
                },
                force: false,
            },
            BuildStep {
                kind: StepKind::Env {
                    vars: vec![("MODE".into(), "fast".into())],
                },
                force: true,
            },
        ],
        start_cmd: Some("python -m http.server".into()),
        ready_cmd: None,
        force: false,
        provision_user: Some("user".into()),
    }
}

async fn story(s: Arc<dyn Store>) {
    let owner = AccountId::generate();
    let other = AccountId::generate();
    let t = template(&owner, &["python", "py"]);
    s.insert_template(&t).await.unwrap();
    assert_eq!(s.get_template(&t.id).await.unwrap(), t);
    assert_eq!(s.template_by_name(&owner, &name("py")).await.unwrap(), t);

    // A name is the account's: taken for it (naming the name), free for
    // another; nothing of the refused template stays.
    let clash = template(&owner, &["node", "python"]);
    match s.insert_template(&clash).await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("'python'"), "{m}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    common::assert_not_found(s.get_template(&clash.id).await);
    common::assert_not_found(s.template_by_name(&owner, &name("node")).await);
    let theirs = template(&other, &["python"]);
    s.insert_template(&theirs).await.unwrap();
    assert_eq!(
        s.template_by_name(&other, &name("python"))
            .await
            .unwrap()
            .id,
        theirs.id
    );

    // Private templates are found by their owner only; a public one by
    // everyone, after their own of the same name.
    let mut shared = template(&other, &["tools"]);
    shared.public = true;
    s.insert_template(&shared).await.unwrap();
    common::assert_not_found(s.template_by_name(&other, &name("py")).await);
    assert_eq!(
        s.template_by_name(&owner, &name("tools")).await.unwrap().id,
        shared.id
    );
    let listed: Vec<_> = s
        .list_templates(&owner)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(listed, vec![t.id.clone(), shared.id.clone()]);

    // Renames keep the order; a taken name is refused and changes nothing.
    let mut renamed = t.clone();
    renamed.names = vec![name("py3"), name("python")];
    renamed.updated_at = Utc::now().trunc_subsecs(6);
    s.update_template(&renamed).await.unwrap();
    assert_eq!(s.get_template(&t.id).await.unwrap(), renamed);
    let mut grabbing = theirs.clone();
    grabbing.names.push(name("tools"));
    match s.update_template(&grabbing).await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("'tools'"), "{m}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(s.get_template(&theirs.id).await.unwrap(), theirs);

    // Builds: waiting, then with their recipe, then ready with a result.
    let mut b = TemplateBuild::new(&t, Utc::now().trunc_subsecs(6));
    s.insert_build(&b).await.unwrap();
    assert_eq!(s.get_build(&b.id).await.unwrap(), b);
    assert_eq!(s.unfinished_builds().await.unwrap(), vec![b.clone()]);
    assert_eq!(s.latest_ready_build(&t.id, None).await.unwrap(), None);
    b.recipe = Some(recipe());
    b.status = BuildStatus::Building;
    b.server = Some("local".into());
    b.sandbox_id = Some(SandboxId::generate());
    b.started_at = Some(Utc::now().trunc_subsecs(6));
    s.update_build(&b).await.unwrap();
    assert_eq!(s.get_build(&b.id).await.unwrap(), b);
    b.status = BuildStatus::Ready;
    b.image_ref = Some(b.image_name());
    b.config = Some(ImageConfig {
        env: [("MODE".to_owned(), "fast".to_owned())].into(),
        workdir: Some("/app".into()),
        user: Some("node".into()),
        start_cmd: Some("python -m http.server".into()),
        ready_cmd: None,
    });
    b.tags = vec!["v1".into()];
    b.finished_at = Some(Utc::now().trunc_subsecs(6));
    s.update_build(&b).await.unwrap();
    assert!(s.unfinished_builds().await.unwrap().is_empty());
    // A newer failed build does not replace it; a newer ready one does,
    // but the tag still finds the tagged one.
    let mut failed = TemplateBuild::new(&t, Utc::now().trunc_subsecs(6));
    failed.status = BuildStatus::Error;
    failed.reason = Some("step 2: exit code 1".into());
    failed.failed_step = Some(2);
    failed.finished_at = Some(Utc::now().trunc_subsecs(6));
    s.insert_build(&failed).await.unwrap();
    assert_eq!(
        s.latest_ready_build(&t.id, None).await.unwrap().unwrap().id,
        b.id
    );
    let mut newer = TemplateBuild::new(&t, Utc::now().trunc_subsecs(6));
    newer.status = BuildStatus::Ready;
    newer.finished_at = Some(b.finished_at.unwrap() + Duration::seconds(1));
    s.insert_build(&newer).await.unwrap();
    assert_eq!(
        s.latest_ready_build(&t.id, None).await.unwrap().unwrap().id,
        newer.id
    );
    assert_eq!(
        s.latest_ready_build(&t.id, Some("v1"))
            .await
            .unwrap()
            .unwrap()
            .id,
        b.id
    );
    assert_eq!(s.latest_ready_build(&t.id, Some("v2")).await.unwrap(), None);
    assert_eq!(s.list_builds(&t.id).await.unwrap().len(), 3);
    assert_eq!(s.get_build(&failed.id).await.unwrap(), failed);

    // Logs: appended in order, read from an offset; an offset written
    // twice is refused.
    let line = |offset: u64, message: &str| BuildLogLine {
        offset,
        at: Utc::now().trunc_subsecs(6),
        level: LogLevel::Info,
        step: Some("1".into()),
        message: message.into(),
    };
    let lines: Vec<_> = (0..5).map(|i| line(i, &format!("line {i}"))).collect();
    s.append_build_logs(&b.id, &lines[..3]).await.unwrap();
    s.append_build_logs(&b.id, &lines[3..]).await.unwrap();
    assert_eq!(s.build_logs(&b.id, 0, 100).await.unwrap(), lines);
    assert_eq!(s.build_logs(&b.id, 3, 1).await.unwrap(), lines[3..4]);
    assert!(s.build_logs(&b.id, 9, 10).await.unwrap().is_empty());
    assert!(matches!(
        s.append_build_logs(&b.id, &[line(4, "again")]).await,
        Err(StoreError::Conflict(_))
    ));

    // The cache: one layer per key, replaced when put again.
    let layer = TemplateLayer {
        key: "k1".into(),
        account_id: owner.clone(),
        server: "local".into(),
        image_ref: "stockade-template-layer:k1".into(),
        config: ImageConfig::default(),
        created_at: Utc::now().trunc_subsecs(6),
    };
    assert_eq!(s.get_layer("k1").await.unwrap(), None);
    s.put_layer(&layer).await.unwrap();
    let mut moved = layer.clone();
    moved.server = "second".into();
    s.put_layer(&moved).await.unwrap();
    assert_eq!(s.get_layer("k1").await.unwrap(), Some(moved.clone()));
    assert_eq!(s.layers_of_account(&owner).await.unwrap(), vec![moved]);
    assert!(s.layers_of_account(&other).await.unwrap().is_empty());
    s.delete_layer("k1").await.unwrap();
    assert_eq!(s.get_layer("k1").await.unwrap(), None);

    // Deleted: its names are free again, its record stays.
    let mut gone = renamed.clone();
    gone.deleted_at = Some(Utc::now().trunc_subsecs(6));
    s.update_template(&gone).await.unwrap();
    common::assert_not_found(s.template_by_name(&owner, &name("python")).await);
    let stored = s.get_template(&t.id).await.unwrap();
    assert!(stored.deleted_at.is_some() && stored.names.is_empty());
    s.insert_template(&template(&owner, &["python"]))
        .await
        .unwrap();
    assert!(!s
        .list_templates(&owner)
        .await
        .unwrap()
        .iter()
        .any(|x| x.id == t.id));
}
