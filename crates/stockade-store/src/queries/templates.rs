//! Templates, builds, build logs and the build cache: [`TemplateStore`].

use async_trait::async_trait;
use stockade_core::template::{
    BuildId, BuildLogLine, BuildStatus, LogLevel, Template, TemplateBuild, TemplateId,
    TemplateLayer, TemplateName,
};
use stockade_core::{AccountId, SandboxId};

use super::corrupt;
use crate::db::{is_unique_violation, Conn, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{StoreError, StoreResult, TemplateStore, MAX_TEMPLATES_LISTED};

/// The columns every template read selects (its names come from their
/// own table).
const COLUMNS: &str = "t.id, t.account_id, t.public, t.cpu_count, t.memory_mb, t.disk_size_gb, \
     t.created_at, t.updated_at, t.deleted_at";

/// The columns every build read selects.
const BUILD_COLUMNS: &str = "id, template_id, account_id, status, recipe, image_ref, config, \
     reason, failed_step, tags, server, sandbox_id, created_at, started_at, finished_at";

fn template_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Template> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("template", &id, problem);
    let account_id: String = row.get("account_id")?;
    let count = |column: &str| -> StoreResult<Option<u32>> {
        let v: Option<i64> = row.get(column)?;
        v.map(u32::try_from)
            .transpose()
            .map_err(|_| bad(format!("{column} out of range")))
    };
    Ok(Template {
        id: TemplateId::parse(&id).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account_id).map_err(|e| bad(e.message))?,
        names: Vec::new(),
        public: row.get("public")?,
        cpu_count: count("cpu_count")?,
        memory_mb: count("memory_mb")?,
        disk_size_gb: count("disk_size_gb")?,
        created_at: row.ts("created_at")?,
        updated_at: row.ts("updated_at")?,
        deleted_at: row.opt_ts("deleted_at")?,
    })
}

fn build_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<TemplateBuild> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("template build", &id, problem);
    let template_id: String = row.get("template_id")?;
    let account_id: String = row.get("account_id")?;
    let status: String = row.get("status")?;
    let recipe: Option<String> = row.get("recipe")?;
    let config: Option<String> = row.get("config")?;
    let tags: String = row.get("tags")?;
    let failed_step: Option<i64> = row.get("failed_step")?;
    let sandbox_id: Option<String> = row.get("sandbox_id")?;
    Ok(TemplateBuild {
        id: BuildId::parse(&id).map_err(|e| bad(e.message))?,
        template_id: TemplateId::parse(&template_id).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account_id).map_err(|e| bad(e.message))?,
        status: BuildStatus::parse(&status).map_err(|e| bad(e.message))?,
        recipe: recipe
            .map(|r| serde_json::from_str(&r))
            .transpose()
            .map_err(|e| bad(format!("recipe: {e}")))?,
        image_ref: row.get("image_ref")?,
        config: config
            .map(|c| serde_json::from_str(&c))
            .transpose()
            .map_err(|e| bad(format!("config: {e}")))?,
        reason: row.get("reason")?,
        failed_step: failed_step
            .map(u32::try_from)
            .transpose()
            .map_err(|_| bad("failed_step out of range".into()))?,
        tags: serde_json::from_str(&tags).map_err(|e| bad(format!("tags: {e}")))?,
        server: row.get("server")?,
        sandbox_id: sandbox_id
            .map(|s| SandboxId::parse(&s))
            .transpose()
            .map_err(|e| bad(e.message))?,
        created_at: row.ts("created_at")?,
        started_at: row.opt_ts("started_at")?,
        finished_at: row.opt_ts("finished_at")?,
    })
}

fn log_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<BuildLogLine> {
    let offset: i64 = row.get("offset_no")?;
    let level: String = row.get("level")?;
    Ok(BuildLogLine {
        offset: u64::try_from(offset)
            .map_err(|_| corrupt("build log line", &offset.to_string(), "negative offset"))?,
        at: row.ts("at")?,
        level: LogLevel::parse(&level),
        step: row.get("step")?,
        message: row.get("message")?,
    })
}

fn layer_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<TemplateLayer> {
    let key: String = row.get("key")?;
    let bad = |problem: String| corrupt("template layer", &key, problem);
    let account_id: String = row.get("account_id")?;
    let config: String = row.get("config")?;
    Ok(TemplateLayer {
        account_id: AccountId::parse(&account_id).map_err(|e| bad(e.message))?,
        server: row.get("server")?,
        image_ref: row.get("image_ref")?,
        config: serde_json::from_str(&config).map_err(|e| bad(format!("config: {e}")))?,
        created_at: row.ts("created_at")?,
        key,
    })
}

fn json<T: serde::Serialize>(value: &T, what: &str) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Other(format!("serialize {what}: {e}")))
}

/// A count as the databases store it.
fn count_column(v: Option<u32>) -> Option<i64> {
    v.map(i64::from)
}

impl<B: Backend> SqlStore<B> {
    /// Writes `template`'s names (after removing the ones it had), unless
    /// it is deleted; a `Conflict` naming a name another template holds.
    async fn write_names_in(
        &self,
        conn: &mut Conn<B>,
        template: &Template,
        context: &str,
    ) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM template_names WHERE template_id = ")
            .bind(template.id.to_string());
        conn.execute(q, context).await?;
        if template.deleted_at.is_some() {
            return Ok(());
        }
        for (position, name) in template.names.iter().enumerate() {
            let q = Q::<B>::new(
                "INSERT INTO template_names (account_id, name, template_id, position) VALUES (",
            )
            .bind(template.account_id.to_string())
            .next(name.to_string())
            .next(template.id.to_string())
            .next(i64::try_from(position).unwrap_or(i64::MAX))
            .sql(")");
            conn.execute_refined(q, context, |e| {
                is_unique_violation(e).then(|| {
                    StoreError::Conflict(format!("a template named '{name}' already exists"))
                })
            })
            .await?;
        }
        Ok(())
    }

    /// `templates` with their names filled in.
    async fn with_names(&self, mut templates: Vec<Template>) -> StoreResult<Vec<Template>> {
        if templates.is_empty() {
            return Ok(templates);
        }
        let mut q =
            Q::<B>::new("SELECT template_id, name FROM template_names WHERE template_id IN (");
        for (i, t) in templates.iter().enumerate() {
            if i > 0 {
                q = q.sql(", ");
            }
            q = q.bind(t.id.to_string());
        }
        q = q.sql(") ORDER BY template_id, position");
        let rows = self.fetch_all(q, "read template names").await?;
        for row in rows {
            let id: String = row.get("template_id")?;
            let name: String = row.get("name")?;
            let name = TemplateName::parse_field(&name, "name")
                .map_err(|e| corrupt("template", &id, e.message))?;
            if let Some(t) = templates.iter_mut().find(|t| t.id.as_str() == id) {
                t.names.push(name);
            }
        }
        Ok(templates)
    }

    async fn one_template(&self, q: Q<B>, context: &str) -> StoreResult<Template> {
        let t = self.one(q, context, template_from_row).await?;
        let mut named = self.with_names(vec![t]).await?;
        named.pop().ok_or(StoreError::NotFound)
    }
}

#[async_trait]
impl<B: Backend> TemplateStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(template.id = %t.id), err(level = "debug"))]
    async fn insert_template(&self, t: &Template) -> StoreResult<()> {
        let q = Q::<B>::new(
            "INSERT INTO templates (id, account_id, public, cpu_count, memory_mb, disk_size_gb, \
             created_at, updated_at, deleted_at) VALUES (",
        )
        .bind(t.id.to_string())
        .next(t.account_id.to_string())
        .next(t.public)
        .next(count_column(t.cpu_count))
        .next(count_column(t.memory_mb))
        .next(count_column(t.disk_size_gb))
        .next_ts(t.created_at)
        .next_ts(t.updated_at)
        .next_opt_ts(t.deleted_at)
        .sql(")");
        let context = format!("insert template {}", t.id);
        let mut conn = self.begin(&context).await?;
        let result = async {
            conn.execute(q, &context).await?;
            self.write_names_in(&mut conn, t, &context).await
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(template.id = %id), err(level = "debug"))]
    async fn get_template(&self, id: &TemplateId) -> StoreResult<Template> {
        let q = Q::<B>::new(format!("SELECT {COLUMNS} FROM templates t WHERE t.id = "))
            .bind(id.to_string());
        self.one_template(q, &format!("get template {id}")).await
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn template_by_name(
        &self,
        account: &AccountId,
        name: &TemplateName,
    ) -> StoreResult<Template> {
        // The account's own first, then the oldest public one.
        let q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM templates t JOIN template_names n ON n.template_id = t.id \
             WHERE t.deleted_at IS NULL AND n.name = "
        ))
        .bind(name.to_string())
        .sql(" AND (n.account_id = ")
        .bind(account.to_string())
        .sql(" OR t.public) ORDER BY CASE WHEN n.account_id = ")
        .bind(account.to_string())
        .sql(" THEN 0 ELSE 1 END, t.created_at, t.id LIMIT 1");
        self.one_template(q, &format!("get template named {name}"))
            .await
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn list_templates(&self, account: &AccountId) -> StoreResult<Vec<Template>> {
        let q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM templates t WHERE t.deleted_at IS NULL AND (t.account_id = "
        ))
        .bind(account.to_string())
        .sql(" OR t.public) ORDER BY CASE WHEN t.account_id = ")
        .bind(account.to_string())
        .sql(format!(
            " THEN 0 ELSE 1 END, t.created_at, t.id LIMIT {MAX_TEMPLATES_LISTED}"
        ));
        let templates = self
            .list(
                q,
                &format!("list templates of {account}"),
                template_from_row,
            )
            .await?;
        self.with_names(templates).await
    }

    #[tracing::instrument(skip_all, fields(template.id = %t.id), err(level = "debug"))]
    async fn update_template(&self, t: &Template) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE templates SET public = ")
            .bind(t.public)
            .set("cpu_count", count_column(t.cpu_count))
            .set("memory_mb", count_column(t.memory_mb))
            .set("disk_size_gb", count_column(t.disk_size_gb))
            .set_ts("updated_at", t.updated_at)
            .set_opt_ts("deleted_at", t.deleted_at)
            .sql(" WHERE id = ")
            .bind(t.id.to_string());
        let context = format!("update template {}", t.id);
        let mut conn = self.begin(&context).await?;
        let result = async {
            if conn.execute(q, &context).await? == 0 {
                return Err(StoreError::NotFound);
            }
            self.write_names_in(&mut conn, t, &context).await
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(build.id = %b.id), err(level = "debug"))]
    async fn insert_build(&self, b: &TemplateBuild) -> StoreResult<()> {
        let q = Q::<B>::new(format!(
            "INSERT INTO template_builds ({BUILD_COLUMNS}) VALUES ("
        ))
        .bind(b.id.to_string())
        .next(b.template_id.to_string())
        .next(b.account_id.to_string())
        .next(b.status.as_str().to_owned())
        .next(b.recipe.as_ref().map(|r| json(r, "recipe")).transpose()?)
        .next(b.image_ref.clone())
        .next(b.config.as_ref().map(|c| json(c, "config")).transpose()?)
        .next(b.reason.clone())
        .next(b.failed_step.map(i64::from))
        .next(json(&b.tags, "tags")?)
        .next(b.server.clone())
        .next(b.sandbox_id.as_ref().map(ToString::to_string))
        .next_ts(b.created_at)
        .next_opt_ts(b.started_at)
        .next_opt_ts(b.finished_at)
        .sql(")");
        self.execute(q, &format!("insert build {}", b.id)).await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(build.id = %id), err(level = "debug"))]
    async fn get_build(&self, id: &BuildId) -> StoreResult<TemplateBuild> {
        let q = Q::<B>::new(format!(
            "SELECT {BUILD_COLUMNS} FROM template_builds WHERE id = "
        ))
        .bind(id.to_string());
        self.one(q, &format!("get build {id}"), build_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(build.id = %b.id), err(level = "debug"))]
    async fn update_build(&self, b: &TemplateBuild) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE template_builds SET status = ")
            .bind(b.status.as_str().to_owned())
            .set(
                "recipe",
                b.recipe.as_ref().map(|r| json(r, "recipe")).transpose()?,
            )
            .set("image_ref", b.image_ref.clone())
            .set(
                "config",
                b.config.as_ref().map(|c| json(c, "config")).transpose()?,
            )
            .set("reason", b.reason.clone())
            .set("failed_step", b.failed_step.map(i64::from))
            .set("tags", json(&b.tags, "tags")?)
            .set("server", b.server.clone())
            .set("sandbox_id", b.sandbox_id.as_ref().map(ToString::to_string))
            .set_opt_ts("started_at", b.started_at)
            .set_opt_ts("finished_at", b.finished_at)
            .sql(" WHERE id = ")
            .bind(b.id.to_string());
        self.execute_one(q, &format!("update build {}", b.id)).await
    }

    #[tracing::instrument(skip_all, fields(template.id = %template), err(level = "debug"))]
    async fn list_builds(&self, template: &TemplateId) -> StoreResult<Vec<TemplateBuild>> {
        let q = Q::<B>::new(format!(
            "SELECT {BUILD_COLUMNS} FROM template_builds WHERE template_id = "
        ))
        .bind(template.to_string())
        .sql(format!(
            " ORDER BY created_at DESC, id DESC LIMIT {MAX_TEMPLATES_LISTED}"
        ));
        self.list(q, &format!("list builds of {template}"), build_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(template.id = %template), err(level = "debug"))]
    async fn latest_ready_build(
        &self,
        template: &TemplateId,
        tag: Option<&str>,
    ) -> StoreResult<Option<TemplateBuild>> {
        // Tags are few per build: they are matched here, not in SQL, so
        // both backends read the JSON list the same way.
        let q = Q::<B>::new(format!(
            "SELECT {BUILD_COLUMNS} FROM template_builds WHERE template_id = "
        ))
        .bind(template.to_string())
        .sql(" AND status = ")
        .bind(BuildStatus::Ready.as_str().to_owned())
        .sql(format!(
            " ORDER BY finished_at DESC, id DESC LIMIT {MAX_TEMPLATES_LISTED}"
        ));
        let builds = self
            .list(q, &format!("ready builds of {template}"), build_from_row)
            .await?;
        Ok(builds
            .into_iter()
            .find(|b| tag.is_none_or(|tag| b.tags.iter().any(|t| t == tag))))
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn unfinished_builds(&self) -> StoreResult<Vec<TemplateBuild>> {
        let q = Q::<B>::new(format!(
            "SELECT {BUILD_COLUMNS} FROM template_builds WHERE status IN ('waiting', 'building') \
             ORDER BY created_at, id"
        ));
        self.list(q, "unfinished builds", build_from_row).await
    }

    #[tracing::instrument(skip_all, fields(build.id = %build), err(level = "debug"))]
    async fn append_build_logs(&self, build: &BuildId, lines: &[BuildLogLine]) -> StoreResult<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let context = format!("append to the log of build {build}");
        let mut conn = self.begin(&context).await?;
        let result = async {
            for line in lines {
                let q = Q::<B>::new(
                    "INSERT INTO template_build_logs (build_id, offset_no, at, level, step, \
                     message) VALUES (",
                )
                .bind(build.to_string())
                .next(i64::try_from(line.offset).unwrap_or(i64::MAX))
                .next_ts(line.at)
                .next(line.level.as_str().to_owned())
                .next(line.step.clone())
                .next(line.message.clone())
                .sql(")");
                conn.execute(q, &context).await?;
            }
            Ok(())
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(build.id = %build), err(level = "debug"))]
    async fn build_logs(
        &self,
        build: &BuildId,
        from: u64,
        limit: u32,
    ) -> StoreResult<Vec<BuildLogLine>> {
        let q = Q::<B>::new(
            "SELECT offset_no, at, level, step, message FROM template_build_logs \
             WHERE build_id = ",
        )
        .bind(build.to_string())
        .sql(" AND offset_no >= ")
        .bind(i64::try_from(from).unwrap_or(i64::MAX))
        .sql(format!(" ORDER BY offset_no LIMIT {limit}"));
        self.list(q, &format!("log of build {build}"), log_from_row)
            .await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn get_layer(&self, key: &str) -> StoreResult<Option<TemplateLayer>> {
        let q = Q::<B>::new(
            "SELECT key, account_id, server, image_ref, config, created_at FROM template_layers \
             WHERE key = ",
        )
        .bind(key.to_owned());
        match self.one(q, "get template layer", layer_from_row).await {
            Ok(layer) => Ok(Some(layer)),
            Err(StoreError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn put_layer(&self, layer: &TemplateLayer) -> StoreResult<()> {
        let context = "put template layer";
        let mut conn = self.begin(context).await?;
        let result = async {
            let q = Q::<B>::new("DELETE FROM template_layers WHERE key = ").bind(layer.key.clone());
            conn.execute(q, context).await?;
            let q = Q::<B>::new(
                "INSERT INTO template_layers (key, account_id, server, image_ref, config, \
                 created_at) VALUES (",
            )
            .bind(layer.key.clone())
            .next(layer.account_id.to_string())
            .next(layer.server.clone())
            .next(layer.image_ref.clone())
            .next(json(&layer.config, "layer config")?)
            .next_ts(layer.created_at)
            .sql(")");
            conn.execute(q, context).await?;
            Ok(())
        }
        .await;
        self.finish(conn, result, context).await
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn layers_of_account(&self, account: &AccountId) -> StoreResult<Vec<TemplateLayer>> {
        let q = Q::<B>::new(
            "SELECT key, account_id, server, image_ref, config, created_at FROM template_layers \
             WHERE account_id = ",
        )
        .bind(account.to_string())
        .sql(" ORDER BY created_at, key");
        self.list(q, "template layers of an account", layer_from_row)
            .await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn delete_layer(&self, key: &str) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM template_layers WHERE key = ").bind(key.to_owned());
        self.execute(q, "delete template layer").await?;
        Ok(())
    }
}
