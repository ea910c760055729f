//! Docker hosts and placement: [`HostStore`]. A
//! placement and a host's removal run in one write transaction that waits
//! for every other one (PostgreSQL: a transaction-scoped advisory lock;
//! SQLite: the database's write lock), so two instances never fill the same
//! room, and a host is never removed while a placement puts a sandbox on it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use stockade_core::quota::Footprint;
use stockade_core::{Host, HostHealth, HostState, HostTls, Operation, Resources, Sandbox};

use super::corrupt;
use super::quotas::{read_sum, HOLDING};
use crate::db::{other, Conn, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{CandidateLoad, HostStore, Placed, PlacementCandidate, StoreError, StoreResult};

/// The columns every read of a host selects.
const COLUMNS: &str = "name, docker_host, tls_ca, tls_cert, tls_key, address, labels, cpus, \
                       memory_bytes, state, state_reason, auto_cordoned, healthy, health_reason, \
                       checked_at, failing_since, seen_cpus, seen_memory_bytes, disk_free_bytes, \
                       created_at, updated_at";

/// A record that is not terminated (soft-deleted ones are terminated too).
const LIVE: &str = "deleted_at IS NULL AND status <> 'TERMINATED'";

/// A count or size as stored (BIGINT): saturating.
fn whole(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn opt_whole(v: Option<u64>) -> Option<i64> {
    v.map(whole)
}

fn read_opt_u64<B: Backend>(row: &DbRow<B>, column: &str) -> StoreResult<Option<u64>> {
    let v: Option<i64> = row.get(column)?;
    Ok(v.map(|n| n.max(0) as u64))
}

fn labels_json(host: &Host) -> StoreResult<String> {
    serde_json::to_string(&host.labels)
        .map_err(|e| other(format_args!("serialize labels of host '{}'", host.name), e))
}

fn host_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Host> {
    let name: String = row.get("name")?;
    let bad = |problem: String| corrupt("host", &name, problem);
    let tls = match (
        row.get::<Option<String>>("tls_ca")?,
        row.get::<Option<String>>("tls_cert")?,
        row.get::<Option<String>>("tls_key")?,
    ) {
        (Some(ca), Some(cert), Some(key)) => Some(HostTls { ca, cert, key }),
        (None, None, None) => None,
        _ => return Err(bad("tls: some of its three files are missing".into())),
    };
    let labels: BTreeMap<String, String> = serde_json::from_str(&row.get::<String>("labels")?)
        .map_err(|e| bad(format!("labels: {e}")))?;
    let state: String = row.get("state")?;
    let cpus = |column: &str| -> StoreResult<Option<u32>> {
        read_opt_u64(row, column)?
            .map(|n| u32::try_from(n).map_err(|_| bad(format!("{column}: {n} is too large"))))
            .transpose()
    };
    Ok(Host {
        docker_host: row.get("docker_host")?,
        tls,
        address: row.get("address")?,
        labels,
        cpus: cpus("cpus")?,
        memory_bytes: read_opt_u64(row, "memory_bytes")?,
        state: HostState::parse(&state).ok_or_else(|| bad(format!("unknown state '{state}'")))?,
        state_reason: row.get("state_reason")?,
        auto_cordoned: row.get("auto_cordoned")?,
        health: HostHealth {
            healthy: row.get("healthy")?,
            reason: row.get("health_reason")?,
            checked_at: row.opt_ts("checked_at")?,
            failing_since: row.opt_ts("failing_since")?,
            cpus: cpus("seen_cpus")?,
            memory_bytes: read_opt_u64(row, "seen_memory_bytes")?,
            disk_free_bytes: read_opt_u64(row, "disk_free_bytes")?,
        },
        created_at: row.ts("created_at")?,
        updated_at: row.ts("updated_at")?,
        name,
    })
}

/// The insert of `host`, every column; the caller appends what happens on
/// a taken name.
fn insert<B: Backend>(host: &Host) -> StoreResult<Q<B>> {
    let tls = host.tls.as_ref();
    let h = &host.health;
    Ok(
        Q::<B>::new(format!("INSERT INTO hosts ({COLUMNS}) VALUES ("))
            .bind(host.name.clone())
            .next(host.docker_host.clone())
            .next(tls.map(|t| t.ca.clone()))
            .next(tls.map(|t| t.cert.clone()))
            .next(tls.map(|t| t.key.clone()))
            .next(host.address.clone())
            .next(labels_json(host)?)
            .next(host.cpus.map(i64::from))
            .next(opt_whole(host.memory_bytes))
            .next(host.state.as_str().to_owned())
            .next(host.state_reason.clone())
            .next(host.auto_cordoned)
            .next(h.healthy)
            .next(h.reason.clone())
            .next_opt_ts(h.checked_at)
            .next_opt_ts(h.failing_since)
            .next(h.cpus.map(i64::from))
            .next(opt_whole(h.memory_bytes))
            .next(opt_whole(h.disk_free_bytes))
            .next_ts(host.created_at)
            .next_ts(host.updated_at)
            .sql(")"),
    )
}

/// Appends `(?, ?, …)` of `values` (at least one).
fn in_list<B: Backend>(mut q: Q<B>, values: impl IntoIterator<Item = String>) -> Q<B> {
    for (i, v) in values.into_iter().enumerate() {
        q = q.sql(if i == 0 { "(" } else { ", " }).bind(v);
    }
    q.sql(")")
}

/// `part` of `limit` as a fraction; an unlimited dimension counts 0.
fn fraction(part: u64, limit: Option<u64>) -> f64 {
    match limit {
        None => 0.0,
        Some(0) if part == 0 => 0.0,
        Some(0) => f64::INFINITY,
        Some(l) => part as f64 / l as f64,
    }
}

/// Where a sandbox that needs `need` goes: among the candidates it fits
/// (reserved + need within both limits), the one whose resulting use is the
/// smallest (the larger of its CPU and memory fractions), ties by name.
/// `Err`: every candidate's load, none fits.
fn choose(
    candidates: &[PlacementCandidate],
    recorded: &HashMap<String, Resources>,
    need: Resources,
) -> Result<String, Vec<CandidateLoad>> {
    let loads: Vec<CandidateLoad> = candidates
        .iter()
        .map(|c| CandidateLoad {
            server: c.server.clone(),
            reserved: recorded
                .get(&c.server)
                .copied()
                .unwrap_or_default()
                .plus(c.extra),
            cpu_limit_millis: c.cpu_limit_millis,
            memory_limit_bytes: c.memory_limit_bytes,
        })
        .collect();
    let mut best: Option<(f64, &CandidateLoad)> = None;
    for load in &loads {
        let after = load.reserved.plus(need);
        let within = |used: u64, limit: Option<u64>| limit.is_none_or(|l| used <= l);
        if !within(after.cpu_millis, load.cpu_limit_millis)
            || !within(after.memory_bytes, load.memory_limit_bytes)
        {
            continue;
        }
        let used = fraction(after.cpu_millis, load.cpu_limit_millis)
            .max(fraction(after.memory_bytes, load.memory_limit_bytes));
        let better = match best {
            None => true,
            Some((score, chosen)) => match used.total_cmp(&score) {
                Ordering::Less => true,
                Ordering::Equal => load.server < chosen.server,
                Ordering::Greater => false,
            },
        };
        if better {
            best = Some((used, load));
        }
    }
    match best {
        Some((_, load)) => Ok(load.server.clone()),
        None => Err(loads),
    }
}

impl<B: Backend> SqlStore<B> {
    /// Makes the open transaction wait for every other placement and host
    /// removal (a no-op where the transaction holds the write lock already).
    async fn placement_lock_in(&self, conn: &mut Conn<B>, context: &str) -> StoreResult<()> {
        if let Some(lock) = B::PLACEMENT_LOCK {
            conn.fetch_all(Q::new(lock), context).await?;
        }
        Ok(())
    }

    /// What the records holding resources reserve on each of `servers`, in
    /// one grouped read; a server without any is missing.
    async fn reserved_on_in(
        &self,
        conn: &mut Conn<B>,
        servers: &[&str],
        context: &str,
    ) -> StoreResult<HashMap<String, Resources>> {
        let q = Q::<B>::new(
            "SELECT server, CAST(COALESCE(SUM(cpu_millis), 0) AS BIGINT) AS cpu, \
             CAST(COALESCE(SUM(memory_bytes), 0) AS BIGINT) AS memory \
             FROM sandboxes WHERE deleted_at IS NULL",
        )
        .sql(format_args!(" AND status IN {HOLDING} AND server IN "));
        let q = in_list(q, servers.iter().map(|s| (*s).to_owned())).sql(" GROUP BY server");
        conn.fetch_all(q, context)
            .await?
            .iter()
            .map(|row| {
                Ok((
                    row.get::<String>("server")?,
                    Resources {
                        cpu_millis: read_sum(row, "cpu")?,
                        memory_bytes: read_sum(row, "memory")?,
                    },
                ))
            })
            .collect()
    }

    /// How many records that are not terminated name `server`.
    async fn held_by_in(
        &self,
        conn: &mut Conn<B>,
        server: &str,
        context: &str,
    ) -> StoreResult<u64> {
        let q = Q::<B>::new(format!(
            "SELECT COUNT(*) AS n FROM sandboxes WHERE {LIVE} AND server = "
        ))
        .bind(server.to_owned());
        let row = conn.fetch_aggregate(q, context).await?;
        read_sum(&row, "n")
    }

    /// The placement's transaction: `Ok(None)` when nothing fits.
    async fn place_in(
        &self,
        conn: &mut Conn<B>,
        sb: &Sandbox,
        op: Option<&Operation>,
        candidates: &[PlacementCandidate],
        context: &str,
    ) -> StoreResult<Result<String, Vec<CandidateLoad>>> {
        self.placement_lock_in(conn, context).await?;
        let mut servers: Vec<&str> = candidates.iter().map(|c| c.server.as_str()).collect();
        servers.sort_unstable();
        servers.dedup();
        let recorded = self.reserved_on_in(conn, &servers, context).await?;
        let chosen = match choose(candidates, &recorded, Footprint::running(&sb.spec).running) {
            Ok(server) => server,
            Err(loads) => return Ok(Err(loads)),
        };
        let mut placed = sb.clone();
        placed.server = chosen.clone();
        self.insert_sandbox_with_operation_in(conn, &placed, op, context)
            .await?;
        Ok(Ok(chosen))
    }
}

#[async_trait]
impl<B: Backend> HostStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(host.name = %host.name), err(level = "debug"))]
    async fn insert_host(&self, host: &Host) -> StoreResult<()> {
        let context = format!("register host '{}'", host.name);
        let name = host.name.clone();
        self.execute_refined(insert::<B>(host)?, &context, move |e| {
            crate::db::is_unique_violation(e)
                .then(|| StoreError::Conflict(format!("host '{name}' exists")))
        })
        .await
        .map(drop)
    }

    #[tracing::instrument(skip_all, fields(host.name = %host.name), err(level = "debug"))]
    async fn ensure_host(&self, host: &Host) -> StoreResult<Host> {
        let context = format!("register host '{}' unless it is", host.name);
        let q = insert::<B>(host)?.sql(" ON CONFLICT (name) DO NOTHING");
        self.execute(q, &context).await?;
        self.get_host(&host.name).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_hosts(&self) -> StoreResult<Vec<Host>> {
        let q = Q::<B>::new(format!("SELECT {COLUMNS} FROM hosts ORDER BY name"));
        self.list(q, "list hosts", host_from_row).await
    }

    #[tracing::instrument(skip_all, fields(host.name = %name), err(level = "debug"))]
    async fn get_host(&self, name: &str) -> StoreResult<Host> {
        let q =
            Q::<B>::new(format!("SELECT {COLUMNS} FROM hosts WHERE name = ")).bind(name.to_owned());
        self.one(q, &format!("read host '{name}'"), host_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(host.name = %host.name), err(level = "debug"))]
    async fn update_host(&self, host: &Host) -> StoreResult<()> {
        let tls = host.tls.as_ref();
        let q = Q::<B>::new("UPDATE hosts SET state = ")
            .bind(host.state.as_str().to_owned())
            .set("state_reason", host.state_reason.clone())
            .set("auto_cordoned", host.auto_cordoned)
            .set("labels", labels_json(host)?)
            .set("cpus", host.cpus.map(i64::from))
            .set("memory_bytes", opt_whole(host.memory_bytes))
            .set("address", host.address.clone())
            .set("tls_ca", tls.map(|t| t.ca.clone()))
            .set("tls_cert", tls.map(|t| t.cert.clone()))
            .set("tls_key", tls.map(|t| t.key.clone()))
            .set_ts("updated_at", host.updated_at)
            .sql(" WHERE name = ")
            .bind(host.name.clone());
        self.execute_one(q, &format!("update host '{}'", host.name))
            .await
    }

    #[tracing::instrument(skip_all, fields(host.name = %name), err(level = "debug"))]
    async fn record_host_health(&self, name: &str, health: &HostHealth) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE hosts SET healthy = ")
            .bind(health.healthy)
            .set("health_reason", health.reason.clone())
            .set_opt_ts("checked_at", health.checked_at)
            .set_opt_ts("failing_since", health.failing_since)
            .set("seen_cpus", health.cpus.map(i64::from))
            .set("seen_memory_bytes", opt_whole(health.memory_bytes))
            .set("disk_free_bytes", opt_whole(health.disk_free_bytes))
            .sql(" WHERE name = ")
            .bind(name.to_owned())
            .sql(" RETURNING name");
        // Read back like a lease's renewal, not counted as a write: this
        // small in-place update succeeding says nothing about the writes of
        // users (a full disk stays degraded until one of those works).
        let context = format!("record the health of host '{name}'");
        let row = self
            .conn(&context)
            .await?
            .returning_optional(q, &context)
            .await?;
        row.map(|_| ()).ok_or(StoreError::NotFound)
    }

    #[tracing::instrument(skip_all, fields(host.name = %name), err(level = "debug"))]
    async fn delete_host(&self, name: &str) -> StoreResult<()> {
        let context = format!("remove host '{name}'");
        let mut conn = self.begin(&context).await?;
        let result = async {
            // No placement puts a sandbox here between the count and the delete.
            self.placement_lock_in(&mut conn, &context).await?;
            let held = self.held_by_in(&mut conn, name, &context).await?;
            if held > 0 {
                let exists =
                    Q::<B>::new("SELECT name FROM hosts WHERE name = ").bind(name.to_owned());
                if conn.fetch_optional(exists, &context).await?.is_none() {
                    return Err(StoreError::NotFound);
                }
                return Err(StoreError::Conflict(format!(
                    "host '{name}' holds {held} sandbox{} that {} not terminated: destroy or \
                     move {} first",
                    if held == 1 { "" } else { "es" },
                    if held == 1 { "is" } else { "are" },
                    if held == 1 { "it" } else { "them" },
                )));
            }
            let q = Q::<B>::new("DELETE FROM hosts WHERE name = ").bind(name.to_owned());
            match conn.execute(q, &context).await? {
                0 => Err(StoreError::NotFound),
                _ => Ok(()),
            }
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn sandboxes_per_server(&self) -> StoreResult<HashMap<String, u64>> {
        let q = Q::<B>::new(format!(
            "SELECT server, COUNT(*) AS n FROM sandboxes WHERE {LIVE} GROUP BY server"
        ));
        self.fetch_all(q, "count the sandboxes of each host")
            .await?
            .iter()
            .map(|row| Ok((row.get::<String>("server")?, read_sum(row, "n")?)))
            .collect()
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %sb.id, candidates = candidates.len()), err(level = "debug"))]
    async fn insert_sandbox_placed(
        &self,
        sb: &mut Sandbox,
        op: Option<&Operation>,
        candidates: &[PlacementCandidate],
    ) -> StoreResult<Placed> {
        if candidates.is_empty() {
            return Ok(Placed::Full(Vec::new()));
        }
        let context = format!("place sandbox {}", sb.id);
        let mut conn = self.begin(&context).await?;
        let result = self.place_in(&mut conn, sb, op, candidates, &context).await;
        match self.finish(conn, result, &context).await? {
            Ok(server) => {
                sb.server = server.clone();
                Ok(Placed::On(server))
            }
            Err(loads) => Ok(Placed::Full(loads)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1 << 30;

    fn candidate(server: &str, cpu: Option<u64>, memory: Option<u64>) -> PlacementCandidate {
        PlacementCandidate {
            server: server.into(),
            cpu_limit_millis: cpu,
            memory_limit_bytes: memory,
            extra: Resources::default(),
        }
    }

    fn res(cpu_millis: u64, memory_gb: u64) -> Resources {
        Resources {
            cpu_millis,
            memory_bytes: memory_gb * GB,
        }
    }

    #[test]
    fn the_freest_candidate_wins() {
        let candidates = [
            candidate("a", Some(8000), Some(16 * GB)),
            candidate("b", Some(8000), Some(16 * GB)),
            candidate("c", Some(4000), Some(64 * GB)),
        ];
        let recorded = HashMap::from([
            ("a".to_owned(), res(4000, 2)),
            ("b".to_owned(), res(1000, 12)),
            ("c".to_owned(), res(1000, 1)),
        ]);
        // a: max(5/8, 3/16) = .625; b: max(2/8, 13/16) = .8125; c: max(2/4, 2/64) = .5.
        assert_eq!(choose(&candidates, &recorded, res(1000, 1)), Ok("c".into()));
        // The larger fraction counts: for 3 CPUs, a: max(7/8, 3/16) = .875,
        // b: max(4/8, 13/16) = .8125, c: max(4/4, 2/64) = 1.
        assert_eq!(choose(&candidates, &recorded, res(3000, 1)), Ok("b".into()));
    }

    #[test]
    fn ties_go_by_name_and_unlimited_counts_zero() {
        let candidates = [candidate("z", None, None), candidate("m", None, None)];
        assert_eq!(
            choose(&candidates, &HashMap::new(), res(64_000, 512)),
            Ok("m".into())
        );
        // Unlimited memory: only the CPU fraction counts.
        let candidates = [
            candidate("a", Some(4000), None),
            candidate("b", Some(8000), Some(GB)),
        ];
        assert_eq!(
            choose(&candidates, &HashMap::new(), res(1000, 1)),
            Ok("a".into())
        );
    }

    #[test]
    fn limits_and_extra_are_respected() {
        let mut full = candidate("a", Some(2000), None);
        full.extra = res(1500, 0);
        let candidates = [full, candidate("b", None, Some(2 * GB))];
        let recorded = HashMap::from([("b".to_owned(), res(0, 1))]);
        let Err(loads) = choose(&candidates, &recorded, res(1000, 2)) else {
            panic!("nothing fits");
        };
        assert_eq!(loads[0].reserved, res(1500, 0));
        assert_eq!(loads[1].reserved, res(0, 1));
        assert_eq!(loads[1].memory_limit_bytes, Some(2 * GB));
        // Exactly at the limit fits.
        assert_eq!(choose(&candidates, &recorded, res(500, 1)), Ok("a".into()));
        assert_eq!(choose(&candidates, &recorded, res(600, 1)), Ok("b".into()));
        // A zero limit holds nothing but empty sandboxes.
        let zero = [candidate("z", Some(0), Some(0))];
        assert!(choose(&zero, &HashMap::new(), res(1, 0)).is_err());
        assert_eq!(choose(&zero, &HashMap::new(), res(0, 0)), Ok("z".into()));
    }
}
