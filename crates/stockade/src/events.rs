//! `events`, `webhook` and `audit`: what happened to the account's
//! sandboxes and snapshots (a page of the feed, or followed live), the
//! webhooks that receive it and their deliveries, and the log of calls made
//! to the API.

use std::io::Read;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand, ValueEnum};
use stockade_core::events::EventKind;
use stockade_sdk::api::{
    AuditEntry, CreateWebhookRequest, Event, UpdateWebhookRequest, Webhook, WebhookDelivery,
};
use stockade_sdk::{AuditParams, Error, EventParams, StreamExt};

use crate::cli::{self, Batch, Ctx};
use crate::output::{self, CliError};

#[derive(Args)]
#[command(after_help = "Examples:
  stockade events                                   # the oldest kept first, up to 100
  stockade events --sandbox demo --type sandbox.lifecycle.stopped
  stockade events --since 1234                      # those after a cursor (see --json)
  stockade events -f                                # new events as they happen (Ctrl-C to leave)
  stockade events -f --json | jq -r '.type + \" \" + .sandboxId'

Types: sandbox.lifecycle.created, started, stopped, paused, resumed,
updated, checkpointed, killed, errored, timed_out, moved, forked (each as
sandbox.lifecycle.NAME); snapshot.created, snapshot.deleted. --json prints
the page with its nextCursor (one event a line with -f).")]
pub struct EventsArgs {
    /// Only events after this cursor (an event's `cursor`, a page's
    /// `nextCursor`).
    #[arg(long, value_name = "CURSOR")]
    since: Option<String>,
    /// At most N events (1 to 100; default 100).
    #[arg(long, short = 'n', value_name = "N", conflicts_with = "follow")]
    limit: Option<u32>,
    /// Only events of this type (repeatable).
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<String>,
    /// Only the events of this sandbox (id or name).
    #[arg(long, value_name = "SANDBOX")]
    sandbox: Option<String>,
    /// Keep printing events as they happen (from now on, or after
    /// --since), until Ctrl-C.
    #[arg(long, short = 'f')]
    follow: bool,
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade audit                                    # your account's calls, oldest kept first
  stockade audit --resource demo                    # the calls about sandbox demo
  stockade audit --account alice --limit 20         # administrators: one account's
  stockade audit --since 5678 --json

Administrators see every account's calls; anyone else their own account's.")]
pub struct AuditArgs {
    /// Only entries after this cursor (an entry's `cursor`, a page's
    /// `nextCursor`).
    #[arg(long, value_name = "CURSOR")]
    since: Option<String>,
    /// At most N entries (1 to 100; default 100).
    #[arg(long, short = 'n', value_name = "N")]
    limit: Option<u32>,
    /// Only this account's calls (name or id; another account's needs an
    /// administrator).
    #[arg(long, value_name = "ACCOUNT")]
    account: Option<String>,
    /// Only the calls about this resource (a sandbox's id or name, a
    /// webhook's id, …).
    #[arg(long, value_name = "ID")]
    resource: Option<String>,
}

/// A delivery's state.
#[derive(Clone, Copy, ValueEnum)]
pub enum DeliveryState {
    /// Waiting for its turn or its next attempt.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Given up after the retry period.
    Failed,
}

impl DeliveryState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }
}

#[derive(Subcommand)]
pub enum WebhookCommand {
    /// Register a webhook: each event of the types it wants is POSTed to
    /// its URL as JSON, signed (`e2b-signature`: base64url, no padding, of
    /// SHA-256 over the secret and then the body).
    #[command(after_help = "Examples:
  stockade webhook create https://hooks.example.com/stockade
  stockade webhook create https://ci.example.com/hook --event sandbox.lifecycle.killed \\
      --event sandbox.lifecycle.errored --name ci
  pass show stockade-hook | stockade webhook create https://x.example.com/h --secret -

Without --secret one is made and printed this once. The server refuses
internal addresses unless its administrator allowed their range
(--allow-internal-addresses).")]
    Create {
        /// Where deliveries go: http:// or https://.
        #[arg(value_name = "URL")]
        endpoint: String,
        /// An event type it wants (repeatable; default: every type).
        #[arg(long = "event", value_name = "TYPE")]
        events: Vec<String>,
        /// The signing secret (8 to 256 characters; `-` reads it from
        /// stdin). Default: one is made and shown once.
        #[arg(long)]
        secret: Option<String>,
        /// A name for people (default: the URL's host).
        #[arg(long)]
        name: Option<String>,
        /// Register it without delivering anything yet (`webhook update ID
        /// --enable` starts it).
        #[arg(long)]
        disabled: bool,
    },
    /// List your webhooks (never their secrets).
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade webhook ls
  stockade webhook ls --json | jq -r '.[] | select(.enabled) | .url'"
    )]
    Ls,
    /// Show one webhook.
    #[command(after_help = "Example:
  stockade webhook get a1b2c3d4e5f6a7b8")]
    Get {
        #[arg(value_name = "WEBHOOK")]
        id: String,
    },
    /// Change a webhook: only what is given changes (--event replaces the
    /// list of types).
    #[command(after_help = "Examples:
  stockade webhook update a1b2c3d4e5f6a7b8 --disable
  stockade webhook update a1b2c3d4e5f6a7b8 --endpoint https://new.example.com/hook --enable
  stockade webhook update a1b2c3d4e5f6a7b8 --event snapshot.created --event snapshot.deleted
  stockade webhook update a1b2c3d4e5f6a7b8 --all-events --secret -")]
    Update {
        #[arg(value_name = "WEBHOOK")]
        id: String,
        /// Where deliveries go from now on (`--url` names the Stockade
        /// server itself).
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// The event types it wants (repeatable; replaces the list).
        #[arg(long = "event", value_name = "TYPE", conflicts_with = "all_events")]
        events: Vec<String>,
        /// It wants every event type.
        #[arg(long)]
        all_events: bool,
        /// Deliver again.
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        /// Deliver nothing until --enable.
        #[arg(long)]
        disable: bool,
        #[arg(long)]
        name: Option<String>,
        /// A new signing secret (8 to 256 characters; `-` reads it from
        /// stdin).
        #[arg(long)]
        secret: Option<String>,
    },
    /// Remove webhooks: nothing more is delivered to them.
    #[command(
        alias = "delete",
        after_help = "Example:
  stockade webhook rm a1b2c3d4e5f6a7b8"
    )]
    Rm {
        #[arg(required = true, value_name = "WEBHOOK")]
        ids: Vec<String>,
    },
    /// A webhook's deliveries, newest first, with their last attempt.
    #[command(after_help = "Examples:
  stockade webhook deliveries a1b2c3d4e5f6a7b8
  stockade webhook deliveries a1b2c3d4e5f6a7b8 --status failed --limit 10 --json")]
    Deliveries {
        #[arg(value_name = "WEBHOOK")]
        id: String,
        /// Only deliveries in this state.
        #[arg(long, value_enum)]
        status: Option<DeliveryState>,
        /// At most N (1 to 100; default 50).
        #[arg(long, short = 'n', value_name = "N")]
        limit: Option<u32>,
    },
    /// Deliver an event again (a new attempt, whatever became of the
    /// earlier ones).
    #[command(after_help = "Example:
  stockade webhook redeliver a1b2c3d4e5f6a7b8 DELIVERY_ID   # ids from `webhook deliveries`")]
    Redeliver {
        #[arg(value_name = "WEBHOOK")]
        id: String,
        #[arg(value_name = "DELIVERY")]
        delivery_id: String,
    },
}

/// API fields and the flags (or arguments) of these commands that set them.
/// (`url` is the webhook's URL argument, or `--endpoint` of an update.)
const FIELD_FLAGS: &[(&str, &str)] = &[
    ("events", "--event"),
    ("signatureSecret", "--secret"),
    ("name", "--name"),
    ("since", "--since"),
    ("limit", "--limit"),
    ("type", "--type"),
    ("sandboxId", "--sandbox"),
    ("accountId", "--account"),
    ("resourceId", "--resource"),
    ("status", "--status"),
    ("id", "WEBHOOK"),
    ("delivery_id", "DELIVERY"),
];

/// `field: message` with the field as the flag that sets it; `url_flag`
/// is what sets a webhook's URL in the command at hand.
fn flag_line(field: &str, message: &str, url_flag: &str) -> String {
    let head = field.split(['.', '[']).next().unwrap_or(field);
    if head == "url" {
        return format!("{url_flag}: {message}");
    }
    match FIELD_FLAGS.iter().find(|(f, _)| *f == head) {
        Some((_, flag)) => format!("{flag}: {message}"),
        None => format!("{field}: {message}"),
    }
}

/// An SDK error in these commands' words: a field the server or the SDK
/// refused is named by its flag; anything else as every command says it.
fn said(e: Error) -> anyhow::Error {
    said_as(e, "URL")
}

/// [`said`], with a webhook's URL set by `url_flag`.
fn said_as(e: Error, url_flag: &str) -> anyhow::Error {
    let fields: Vec<(String, String)> = match &e {
        Error::Api {
            code,
            details: Some(d),
            ..
        } if code == "validation_failed" => d["fields"]
            .as_array()
            .map(|fs| {
                fs.iter()
                    .map(|f| {
                        (
                            f["field"].as_str().unwrap_or("?").to_owned(),
                            f["message"].as_str().unwrap_or("?").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        Error::InvalidParams { field, message } => vec![(field.clone(), message.clone())],
        _ => Vec::new(),
    };
    if fields.is_empty() {
        return output::sdk_error(&e, None).into();
    }
    let lines: Vec<String> = fields
        .iter()
        .map(|(f, m)| flag_line(f, m, url_flag))
        .collect();
    let message = match lines.as_slice() {
        [one] => one.clone(),
        many => format!("invalid request:\n  {}", many.join("\n  ")),
    };
    let code = e.code().unwrap_or("invalid_argument");
    CliError::new(code, message).into()
}

/// Like [`said`], with a webhook that is not found named in CLI words.
fn about_webhook(id: &str) -> impl Fn(Error) -> anyhow::Error + '_ {
    about_webhook_as(id, "URL")
}

/// [`about_webhook`], with a webhook's URL set by `url_flag`.
fn about_webhook_as<'a>(id: &'a str, url_flag: &'a str) -> impl Fn(Error) -> anyhow::Error + 'a {
    move |e| {
        if e.is_not_found() {
            return CliError::new(
                "not_found",
                format!("webhook `{id}` not found — `stockade webhook ls` lists your webhooks"),
            )
            .into();
        }
        said_as(e, url_flag)
    }
}

/// A time as the tables show it.
fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// The facts of an event in a few words: what its data says, the snapshot
/// it is about.
fn details(e: &Event) -> String {
    let mut parts = Vec::new();
    if e.resource_type != "sandbox" {
        parts.push(format!("{} {}", e.resource_type, e.resource_id));
    }
    if let Some(serde_json::Value::Object(data)) = &e.event_data {
        for (key, value) in data {
            // The sandbox's metadata is its own, and long: --json has it.
            if key == "sandbox_metadata" || value.is_null() {
                continue;
            }
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            let key = match key.as_str() {
                "set_timeout" => "timeout",
                "forkId" => "fork",
                "snapshotId" => "snapshot",
                k => k,
            };
            parts.push(format!("{key}: {text}"));
        }
    }
    parts.join("; ")
}

fn event_row(e: &Event) -> Vec<String> {
    vec![
        time(e.timestamp),
        e.kind.clone(),
        e.sandbox_id.clone().unwrap_or_else(|| "-".into()),
        details(e),
    ]
}

const EVENT_HEADER: [&str; 4] = ["TIME", "TYPE", "SANDBOX", "DETAILS"];

/// The width of the TYPE column of a followed feed: its longest type.
fn type_width() -> usize {
    EventKind::ALL
        .iter()
        .map(|k| k.as_str().len())
        .max()
        .unwrap_or(0)
}

/// One row of a followed feed, in columns as wide as a page's would be
/// at most.
fn follow_line(cells: &[String]) -> String {
    let line = format!(
        "{:<19}  {:<tw$}  {:<12}  {}",
        cells[0],
        cells[1],
        cells[2],
        cells[3],
        tw = type_width()
    );
    line.trim_end().to_owned()
}

/// Says where the next page starts when this one was full.
fn more_after(full: bool, cursor: &str, command: &str) {
    if full {
        errln!("(more after this page: `stockade {command} --since {cursor}`)");
    }
}

pub async fn events(ctx: &Ctx, a: EventsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let params = EventParams {
        since: a.since,
        limit: a.limit,
        types: a.types,
        sandbox: a.sandbox,
    };
    if a.follow {
        return follow(ctx, &client, &params).await;
    }
    let page = client.events(&params).await.map_err(said)?;
    if ctx.json {
        output::json(&page)?;
        return Ok(ExitCode::SUCCESS);
    }
    if page.events.is_empty() {
        match &params.since {
            Some(c) => outln!("No events after {c}.")?,
            None => outln!("No events.")?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = page.events.iter().map(event_row).collect();
    output::table(&EVENT_HEADER, &rows)?;
    let full = page.events.len() as u32 >= params.limit.unwrap_or(stockade_sdk::MAX_PAGE);
    more_after(full, &page.next_cursor, "events");
    Ok(ExitCode::SUCCESS)
}

/// Prints events as they come until Ctrl-C (or the stream fails).
async fn follow(
    ctx: &Ctx,
    client: &stockade_sdk::Client,
    params: &EventParams,
) -> anyhow::Result<ExitCode> {
    let mut stream = client.event_stream(params).await.map_err(said)?;
    if !ctx.json {
        let header: Vec<String> = EVENT_HEADER.iter().map(|h| (*h).to_owned()).collect();
        outln!("{}", follow_line(&header))?;
    }
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let next = tokio::select! {
            _ = &mut interrupted => break,
            next = stream.next() => next,
        };
        let Some(event) = next else { break };
        let event = event.map_err(said)?;
        if ctx.json {
            outln!("{}", serde_json::to_string(&event)?)?;
        } else {
            outln!("{}", follow_line(&event_row(&event)))?;
        }
    }
    if let (Some(cursor), false) = (stream.cursor(), ctx.json) {
        errln!("(to go on from here: `stockade events -f --since {cursor}`)");
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn audit(ctx: &Ctx, a: AuditArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let account_id = match &a.account {
        Some(arg) => Some(cli::account_named(&client, arg).await?.0),
        None => None,
    };
    let params = AuditParams {
        since: a.since,
        limit: a.limit,
        account_id,
        resource_id: a.resource,
    };
    let page = client.audit(&params).await.map_err(said)?;
    if ctx.json {
        output::json(&page)?;
        return Ok(ExitCode::SUCCESS);
    }
    if page.entries.is_empty() {
        outln!("No entries.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = page.entries.iter().map(audit_row).collect();
    output::table(
        &[
            "TIME", "ACCOUNT", "ACTION", "RESOURCE", "STATUS", "FROM", "DURATION",
        ],
        &rows,
    )?;
    let full = page.entries.len() as u32 >= params.limit.unwrap_or(stockade_sdk::MAX_PAGE);
    more_after(full, &page.next_cursor, "audit");
    Ok(ExitCode::SUCCESS)
}

fn audit_row(e: &AuditEntry) -> Vec<String> {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    vec![
        time(e.timestamp),
        dash(&e.account_id),
        e.action.clone(),
        dash(&e.resource_id),
        e.status.to_string(),
        e.front_end.clone(),
        output::run_time(std::time::Duration::from_millis(e.duration_ms)),
    ]
}

/// A secret as `--secret` gives it: `-` reads it from stdin (without its
/// line end), so that it stays out of the process list and shell history.
fn secret_arg(secret: Option<String>) -> anyhow::Result<Option<String>> {
    match secret.as_deref() {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::new("io_error", format!("--secret -: {e}")))?;
            let text = text.trim_end_matches(['\n', '\r']).to_owned();
            if text.is_empty() {
                return Err(CliError::invalid("--secret -: stdin held no secret").into());
            }
            Ok(Some(text))
        }
        _ => Ok(secret),
    }
}

/// The types a webhook wants, in words: `every type` when it is all of
/// them.
fn types_text(events: &[String], short: bool) -> String {
    let every = EventKind::ALL
        .iter()
        .all(|k| events.iter().any(|e| e == k.as_str()));
    if every {
        return "every type".into();
    }
    if short && events.len() > 2 {
        return format!("{} types", events.len());
    }
    events.join(", ")
}

fn yes_no(v: bool) -> String {
    if v { "yes" } else { "no" }.into()
}

fn webhook_row(w: &Webhook) -> Vec<String> {
    vec![
        w.id.clone(),
        w.name.clone(),
        w.url.clone(),
        types_text(&w.events, true),
        yes_no(w.enabled),
        time(w.created_at),
    ]
}

fn webhook_details(w: &Webhook) -> anyhow::Result<()> {
    outln!("id:       {}", w.id)?;
    outln!("name:     {}", w.name)?;
    outln!("url:      {}", w.url)?;
    outln!("enabled:  {}", yes_no(w.enabled))?;
    outln!("events:   {}", types_text(&w.events, false))?;
    outln!("created:  {}", time(w.created_at))?;
    Ok(())
}

/// What the last attempt at a delivery got: the receiver's status, or why
/// there was none.
fn last_attempt(d: &WebhookDelivery) -> String {
    match d.attempt_log.first() {
        None => "-".into(),
        Some(a) => match (a.status_code, &a.error) {
            (Some(code), _) => format!("HTTP {code} after {}ms", a.duration_ms),
            (None, Some(err)) => err.chars().take(60).collect(),
            (None, None) => "no answer".into(),
        },
    }
}

fn delivery_row(d: &WebhookDelivery) -> Vec<String> {
    vec![
        d.id.clone(),
        d.event_type.clone(),
        d.sandbox_id.clone().unwrap_or_else(|| "-".into()),
        d.status.clone(),
        d.attempts.to_string(),
        last_attempt(d),
        time(d.created_at),
    ]
}

pub async fn webhook(ctx: &Ctx, cmd: WebhookCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        WebhookCommand::Create {
            endpoint,
            events,
            secret,
            name,
            disabled,
        } => {
            let req = CreateWebhookRequest {
                name,
                url: endpoint,
                enabled: disabled.then_some(false),
                events: (!events.is_empty()).then_some(events),
                signature_secret: secret_arg(secret)?,
            };
            let w = client.create_webhook(&req).await.map_err(said)?;
            if ctx.json {
                output::json(&w)?;
            } else {
                outln!("Created webhook {} ({}) for {}", w.name, w.id, w.url)?;
                outln!("events:   {}", types_text(&w.events, false))?;
                if !w.enabled {
                    outln!(
                        "It delivers nothing until `stockade webhook update {} --enable`.",
                        w.id
                    )?;
                }
                if let Some(s) = &w.signature_secret {
                    outln!("Signing secret (shown once): {s}")?;
                }
            }
        }
        WebhookCommand::Ls => {
            let hooks = client.webhooks().await.map_err(said)?;
            if ctx.json {
                output::json(&hooks)?;
            } else if hooks.is_empty() {
                outln!("No webhooks. Register one with `stockade webhook create URL`.")?;
            } else {
                let rows: Vec<Vec<String>> = hooks.iter().map(webhook_row).collect();
                output::table(
                    &["ID", "NAME", "URL", "EVENTS", "ENABLED", "CREATED"],
                    &rows,
                )?;
            }
        }
        WebhookCommand::Get { id } => {
            let w = client.webhook(&id).await.map_err(about_webhook(&id))?;
            if ctx.json {
                output::json(&w)?;
            } else {
                webhook_details(&w)?;
            }
        }
        WebhookCommand::Update {
            id,
            endpoint,
            events,
            all_events,
            enable,
            disable,
            name,
            secret,
        } => {
            let events = if all_events {
                Some(EventKind::ALL.iter().map(|k| k.as_str().into()).collect())
            } else {
                (!events.is_empty()).then_some(events)
            };
            let enabled = match (enable, disable) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            let req = UpdateWebhookRequest {
                name,
                url: endpoint,
                enabled,
                events,
                signature_secret: secret_arg(secret)?,
            };
            if req == UpdateWebhookRequest::default() {
                return Err(CliError::invalid(
                    "nothing to change: give --endpoint, --event (or --all-events), --enable or --disable, --name or --secret",
                )
                .into());
            }
            let w = client
                .update_webhook(&id, &req)
                .await
                .map_err(about_webhook_as(&id, "--endpoint"))?;
            if ctx.json {
                output::json(&w)?;
            } else {
                outln!("Updated webhook {} ({})", w.name, w.id)?;
                webhook_details(&w)?;
            }
        }
        WebhookCommand::Rm { ids } => {
            let mut batch = Batch::new(ctx.json);
            for id in &ids {
                match client.delete_webhook(id).await {
                    Ok(()) => batch.ok(
                        serde_json::json!({ "id": id, "removed": true }),
                        &format!("{id}: removed"),
                    )?,
                    Err(e) => batch.failed(id, about_webhook(id)(e))?,
                }
            }
            return batch.finish();
        }
        WebhookCommand::Deliveries { id, status, limit } => {
            let list = client
                .webhook_deliveries(&id, limit, status.map(DeliveryState::as_str))
                .await
                .map_err(about_webhook(&id))?;
            if ctx.json {
                output::json(&list)?;
            } else if list.deliveries.is_empty() {
                outln!(
                    "Webhook {id} has no deliveries{}.",
                    match status {
                        Some(s) => format!(" that are {}", s.as_str()),
                        None => String::new(),
                    }
                )?;
            } else {
                let rows: Vec<Vec<String>> = list.deliveries.iter().map(delivery_row).collect();
                output::table(
                    &[
                        "ID",
                        "EVENT",
                        "SANDBOX",
                        "STATUS",
                        "ATTEMPTS",
                        "LAST ATTEMPT",
                        "CREATED",
                    ],
                    &rows,
                )?;
            }
        }
        WebhookCommand::Redeliver { id, delivery_id } => {
            let d = client
                .redeliver(&id, &delivery_id)
                .await
                .map_err(|e| {
                    if e.is_not_found() {
                        return CliError::new(
                            "not_found",
                            format!(
                                "no delivery `{delivery_id}` of webhook `{id}` — `stockade webhook deliveries {id}` lists them"
                            ),
                        )
                        .into();
                    }
                    said(e)
                })?;
            output::json_or(ctx.json, &d, || {
                format!(
                    "Queued {} of event {} ({}) again: delivery {}",
                    d.event_type, d.event_id, d.status, d.id
                )
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: serde_json::Value, resource_type: &str) -> Event {
        serde_json::from_value(serde_json::json!({
            "version": "v1", "id": "e1", "type": "sandbox.lifecycle.updated",
            "eventData": data, "sandboxBuildId": null, "sandboxExecutionId": null,
            "sandboxId": "ab12cd34ef56", "sandboxTeamId": "acc",
            "sandboxTemplateId": "img", "timestamp": "2024-05-01T10:00:00Z",
            "resourceType": resource_type, "resourceId": "sn1", "cursor": "7",
        }))
        .unwrap()
    }

    #[test]
    fn details_say_what_changed() {
        let e = event(
            serde_json::json!({
                "changed": ["cpuCores", "memoryGB"], "reason": "by hand",
                "sandbox_metadata": {"a": "b"},
            }),
            "sandbox",
        );
        assert_eq!(details(&e), "changed: cpuCores,memoryGB; reason: by hand");
        let e = event(serde_json::Value::Null, "snapshot");
        assert_eq!(details(&e), "snapshot sn1");
        let row = event_row(&e);
        assert_eq!(row[0], "2024-05-01 10:00:00");
        assert_eq!(row[2], "ab12cd34ef56");
        let line = follow_line(&row);
        assert!(line.starts_with("2024-05-01 10:00:00  sandbox.lifecycle.updated  "));
        assert!(line.ends_with("ab12cd34ef56  snapshot sn1"), "{line}");
    }

    #[test]
    fn refused_fields_name_their_flags() {
        let e = said(Error::Api {
            status: 400,
            code: "validation_failed".into(),
            message: "Invalid request".into(),
            details: Some(serde_json::json!({ "fields": [
                { "field": "url", "message": "scheme 'ftp' is not allowed: use http or https" },
            ]})),
        });
        let c = output::classify(&e);
        assert_eq!(
            (c.code.as_str(), c.message.as_str()),
            (
                "validation_failed",
                "URL: scheme 'ftp' is not allowed: use http or https"
            )
        );
        let c = output::classify(&said(Error::InvalidParams {
            field: "limit".into(),
            message: "must be 1 to 100, got 0".into(),
        }));
        assert_eq!(c.message, "--limit: must be 1 to 100, got 0");
        assert_eq!(c.code, "invalid_argument");
        assert_eq!(flag_line("events[1]", "unknown", "URL"), "--event: unknown");
        assert_eq!(
            flag_line("url", "has no host", "--endpoint"),
            "--endpoint: has no host"
        );
    }

    #[test]
    fn every_type_is_said_so() {
        let all: Vec<String> = EventKind::ALL.iter().map(|k| k.as_str().into()).collect();
        assert_eq!(types_text(&all, true), "every type");
        let some = vec!["snapshot.created".to_owned(), "snapshot.deleted".into()];
        assert_eq!(
            types_text(&some, true),
            "snapshot.created, snapshot.deleted"
        );
        let three = [some.clone(), vec!["sandbox.lifecycle.killed".into()]].concat();
        assert_eq!(types_text(&three, true), "3 types");
    }
}
