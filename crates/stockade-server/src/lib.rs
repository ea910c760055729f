//! Stockade's HTTP server as a library: the axum router over a [`Store`] and
//! a [`Runtime`], authentication, reconciliation and the first-start bootstrap.
//! The binary chooses the concrete store and runtime; tests pass their own.
#![forbid(unsafe_code)]

use std::sync::Arc;

use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use axum::Router;
use stockade_runtime::Runtime;
use stockade_service::Service;
use stockade_store::Store;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

pub mod audit;
pub mod compat;
pub mod config;
pub mod error;
pub mod extract;
pub mod host_routing;
pub mod metrics;
pub mod proxy;
pub mod ratelimit;
pub mod routes;
pub mod serve;
pub mod sse;
pub mod streams;

pub use config::ServerConfig;
pub use error::{ApiError, ApiResult};

/// What every handler gets: the service, the server's configuration and
/// the key of the proxy's sandbox tokens.
#[derive(Clone)]
pub struct AppState {
    pub svc: Service,
    pub config: Arc<ServerConfig>,
    /// Signs and checks sandbox tokens for the proxy.
    pub proxy_keys: proxy::token::TokenKey,
    /// `/health`'s cached Docker and database probes.
    pub health: Arc<routes::health::HealthCache>,
    /// When this instance last recorded each token's use.
    pub token_use: Arc<extract::TokenUse>,
    /// Open terminals, event streams and proxied WebSockets per account.
    pub streams: Arc<streams::StreamLimiter>,
}

impl AppState {
    pub async fn new(
        store: Arc<dyn Store>,
        runtime: Arc<dyn Runtime>,
        config: ServerConfig,
    ) -> Result<Self, stockade_store::StoreError> {
        let svc = Service::new(store, runtime, config.service.clone()).await?;
        let proxy_keys = svc.token_key().await?;
        let streams = Arc::new(streams::StreamLimiter::new(
            config.connections.max_streams_per_account,
        ));
        Ok(Self {
            svc,
            config: Arc::new(config),
            proxy_keys,
            health: Arc::default(),
            token_use: Arc::default(),
            streams,
        })
    }
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    use routes::{accounts, docs, health, hosts, sandboxes};
    let api = Router::new()
        .route("/health", get(health::health))
        .route("/openapi.json", get(docs::openapi_json))
        .route("/docs", get(docs::docs_page))
        .route("/me", get(accounts::me))
        .route(
            "/session",
            post(accounts::sign_in).delete(accounts::sign_out),
        )
        .route("/accounts", post(accounts::create).get(accounts::list))
        .route(
            "/sandbox",
            post(sandboxes::create)
                .get(sandboxes::list)
                .delete(compat::prime::bulk_delete),
        )
        .route(
            "/sandbox/bulk",
            axum::routing::delete(sandboxes::bulk_delete),
        )
        .route(
            "/sandbox/{id}",
            get(sandboxes::get).delete(sandboxes::destroy),
        )
        .route("/sandbox/{id}/start", post(sandboxes::start))
        .route("/sandbox/{id}/stop", post(sandboxes::stop))
        .route("/sandbox/{id}/pause", post(sandboxes::pause))
        .route("/sandbox/{id}/resume", post(sandboxes::resume))
        .route("/sandbox/{id}/usage/history", get(sandboxes::usage_history))
        .route("/hosts", post(hosts::create).get(hosts::list))
        .route(
            "/hosts/{name}",
            get(hosts::get_one)
                .patch(hosts::update)
                .delete(hosts::remove),
        )
        .merge(routes::ports::routes())
        .merge(routes::logs::routes())
        .merge(routes::exec::routes())
        .merge(routes::code::routes())
        .merge(routes::files::routes())
        .merge(routes::teams::routes())
        .merge(accounts::routes())
        .merge(routes::tokens::routes())
        .merge(routes::volumes::routes())
        .merge(routes::update::routes())
        .merge(routes::snapshots::routes())
        .merge(routes::shared_volumes::routes())
        .merge(routes::templates::routes())
        .merge(routes::terminal::routes())
        .merge(routes::events::routes())
        .merge(compat::prime::api_routes());
    let limiter = Arc::new(
        ratelimit::RateLimiter::new(state.config.rate_limit.clone(), state.svc.metrics().clone())
            .with_proxy_domain(state.config.proxy_domain.clone()),
    );
    Router::new()
        .nest("/api/v1", api)
        .nest(compat::envd::E2B_PREFIX, compat::e2b_routes())
        .merge(compat::prime::gateway_routes())
        .merge(proxy::routes())
        .route("/metrics", get(metrics::scrape))
        .route("/", get(routes::dashboard::index))
        .route("/dashboard/{file}", get(routes::dashboard::asset))
        .fallback(routes::not_found)
        // Every route registered above without a handler of its own for a
        // wrong method (E2B's and the gateway's have theirs) answers 405 in
        // Stockade's shape; axum keeps the `Allow` header.
        .method_not_allowed_fallback(routes::method_not_allowed)
        // Cross-cutting layers come last so that they wrap every route above:
        // rate limits of the routed requests inside the metrics, so 429s
        // are counted by route; the per-account cap of event streams inside
        // the rate limits.
        .layer(from_fn_with_state(
            state.clone(),
            streams::limit_event_streams,
        ))
        .layer(from_fn_with_state(limiter.clone(), ratelimit::limit))
        .layer(from_fn_with_state(state.clone(), metrics::track))
        .layer(from_fn_with_state(state.clone(), audit::record))
        // E2B's in-sandbox calls (by their E2b-Sandbox-Id header) and
        // host-form proxy requests are routed before anything else, so
        // their rate limits come ahead of them.
        .layer(from_fn_with_state(state.clone(), compat::envd::by_header))
        .layer(from_fn_with_state(state.clone(), host_routing::by_host))
        .layer(from_fn_with_state(
            limiter.clone(),
            ratelimit::limit_routed_early,
        ))
        // Failed authentications (the proxy's token checks too) and
        // metrics scrapes, per client, ahead of everything; this layer
        // also tells the others which front-end a request goes to.
        .layer(from_fn_with_state(limiter, ratelimit::guard))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

pub use stockade_service::accounts::{bootstrap, Bootstrap};

/// A running server: its address and a handle to stop it.
pub struct RunningServer {
    pub addr: std::net::SocketAddr,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Binds `config.listen`, starts the service's background work (which
/// recovers and reconciles first), and serves until `shutdown` is
/// cancelled. Then it stops accepting, ends every event stream with
/// an `end` event, waits up to `config.shutdown_grace` for requests in
/// flight and for the background tasks, and returns. Operations still
/// running are left to recovery (their leases run out).
pub async fn spawn(state: AppState) -> std::io::Result<RunningServer> {
    let listener = serve::bind(state.config.listen)?;
    let addr = listener.local_addr()?;
    state.svc.note_listen_address(addr);
    let shutdown = CancellationToken::new();
    let background = state.svc.start_background(shutdown.clone()).await;
    let grace = state.config.shutdown_grace;
    let limits = state.config.connections.clone();
    let svc = state.svc.clone();
    let app = router(state);
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        // A capped accept loop with header and idle timeouts; the
        // peer address feeds the per-client rate limit.
        let serve = serve::serve(listener, app, limits, token.clone());
        let deadline = async {
            token.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        let served = tokio::select! {
            served = serve => served,
            () = deadline => {
                tracing::warn!(grace_secs = grace.as_secs_f64(), "requests still in flight after the shutdown grace period; stopping anyway");
                Ok(())
            }
        };
        // The warm pool finishes its fills (and drains, if configured).
        if tokio::time::timeout(grace, background.finished())
            .await
            .is_err()
        {
            tracing::warn!("background tasks did not finish within the shutdown grace period");
        }
        // Egress entries and volumes' file systems of stopped and
        // destroyed sandboxes still being removed.
        if tokio::time::timeout(grace, svc.finish_removals())
            .await
            .is_err()
        {
            tracing::warn!("egress entries or volumes' file systems were still being removed at the end of the shutdown grace period");
        }
        served
    });
    Ok(RunningServer {
        addr,
        shutdown,
        task,
    })
}
