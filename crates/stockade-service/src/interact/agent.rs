//! The in-sandbox agent from the service's side: every
//! sandbox's access token — derived from a key in the database, so every
//! server instance knows it without storing one per sandbox — and pooled
//! clients that reach the agent at the container's address. A sandbox made
//! before agents existed has none: its callers fall back to `docker exec`
//! and the archive API.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use stockade_agent::client::{AgentClient, Endpoint};
use stockade_core::{Sandbox, SandboxId, SandboxStatus};
use stockade_store::{Store, StoreResult};

use crate::error::ServiceResult;
use crate::Service;

/// The settings key of the agent tokens' HMAC key.
const KEY_SETTING: &str = "agent_token_key";

/// The most clients kept at once (one per sandbox in use).
const MAX_CLIENTS: usize = 4096;

/// A sandbox's agent as last seen: where it listened in which session.
#[derive(Clone)]
struct Reached {
    started_at: Option<DateTime<Utc>>,
    /// `None`: this sandbox's container has no agent.
    client: Option<(IpAddr, AgentClient)>,
}

/// Tokens and clients of the sandboxes' agents.
pub struct Agents {
    key: Vec<u8>,
    clients: Mutex<HashMap<SandboxId, Reached>>,
    /// Clients of warm-pool members, connected while they wait:
    /// a claim hands its member's over, so the first command of a sandbox
    /// from the pool neither looks the container up nor connects.
    warm: Mutex<HashMap<SandboxId, Warm>>,
}

/// A warm-pool member's agent, reached when the member was made.
#[derive(Clone)]
struct Warm {
    ip: IpAddr,
    client: AgentClient,
    container_id: String,
}

/// What a warm member's agent proved of itself at a claim.
#[derive(Debug, PartialEq, Eq)]
pub enum Vouch {
    /// The member's own agent answered: the member runs, at `ip`, in the
    /// container `container_id`.
    Member { ip: IpAddr, container_id: String },
    /// Something else answered at the member's address (another
    /// container took the address of a member that died).
    Impostor,
    /// Nothing that says either (not reached yet, no answer in time, an
    /// agent without the route): Docker has to say.
    Unknown,
}

/// How long a claim waits for a member's agent to prove itself.
const VOUCH_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

impl std::fmt::Debug for Agents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agents").finish_non_exhaustive()
    }
}

impl Agents {
    /// Loads (or, on the first start, makes) the key tokens derive from.
    pub async fn load(store: &dyn Store) -> StoreResult<Self> {
        let fresh = {
            use rand::RngCore;
            let mut bytes = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut bytes);
            hex::encode(bytes)
        };
        let key = store.setting_get_or_insert(KEY_SETTING, &fresh).await?;
        Ok(Self {
            key: key.into_bytes(),
            clients: Mutex::new(HashMap::new()),
            warm: Mutex::new(HashMap::new()),
        })
    }

    /// The access token of `id`'s agent: HMAC-SHA256 of the sandbox id.
    /// Only the server (and the sandbox itself) ever knows it.
    pub fn token(&self, id: &SandboxId) -> String {
        self.derive("stockade-agent:", id.as_str())
    }

    /// A secret derived from the key for `subject` under `domain` (each use
    /// its own domain, so no secret serves another's purpose): hex of
    /// HMAC-SHA256 of the domain and the subject.
    pub fn derive(&self, domain: &str, subject: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(domain.as_bytes());
        mac.update(subject.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Forgets what is known about `id`'s agent (it stopped or went).
    pub fn forget(&self, id: &SandboxId) {
        self.lock().remove(id);
        self.warm_lock().remove(id);
    }

    fn warm_lock(&self) -> std::sync::MutexGuard<'_, HashMap<SandboxId, Warm>> {
        self.warm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a connected client of warm-pool member `id` at `ip`, in the
    /// container `container_id`.
    pub async fn prime(&self, id: &SandboxId, ip: IpAddr, container_id: String) {
        let client = AgentClient::new(endpoint(ip), Some(self.token(id)));
        wait_until_ready(&client).await;
        let mut warm = self.warm_lock();
        // A member discarded while its agent was being reached may leave
        // its entry behind: never let such entries crowd out new ones.
        if warm.len() >= MAX_CLIENTS {
            warm.clear();
        }
        warm.insert(
            id.clone(),
            Warm {
                ip,
                client,
                container_id,
            },
        );
    }

    /// Asks warm member `id`'s agent, at the address it had when it was
    /// reached, to prove it holds the member's token, without sending the
    /// token there: one round trip, where Docker's inspection of the
    /// container costs the engine's time and CPU.
    pub async fn vouch(&self, id: &SandboxId) -> Vouch {
        let Some(warm) = self.warm_lock().get(id).cloned() else {
            return Vouch::Unknown;
        };
        let challenge = {
            use rand::RngCore;
            let mut bytes = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut bytes);
            hex::encode(bytes)
        };
        match tokio::time::timeout(VOUCH_TIMEOUT, warm.client.identity(&challenge)).await {
            Ok(Ok(answer)) => {
                let token = self.token(id);
                if stockade_agent::identity::verify(token.as_bytes(), &challenge, &answer) {
                    Vouch::Member {
                        ip: warm.ip,
                        container_id: warm.container_id,
                    }
                } else {
                    Vouch::Impostor
                }
            }
            _ => Vouch::Unknown,
        }
    }

    /// Hands the primed client of a claimed member to the sandbox's session
    /// starting at `started_at`.
    pub fn adopt(&self, id: &SandboxId, started_at: Option<DateTime<Utc>>) {
        let Some(Warm { ip, client, .. }) = self.warm_lock().remove(id) else {
            return;
        };
        let mut clients = self.lock();
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(
            id.clone(),
            Reached {
                started_at,
                client: Some((ip, client)),
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SandboxId, Reached>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Service {
    /// Whether warm-pool member `id`'s agent has been reached, so that a
    /// claim can ask it to prove itself rather than ask Docker.
    pub fn member_reached(&self, id: &SandboxId) -> bool {
        self.agents.warm_lock().contains_key(id)
    }

    /// The client of `sb`'s agent, or `None` when its container has no
    /// agent (the caller falls back to Docker) or does not run. The address
    /// is looked up once per session of the sandbox and cached.
    pub async fn agent(&self, sb: &Sandbox) -> ServiceResult<Option<AgentClient>> {
        if sb.status != SandboxStatus::Running {
            return Ok(None);
        }
        if let Some(seen) = self.agents.lock().get(&sb.id) {
            if seen.started_at == sb.started_at {
                return Ok(seen.client.as_ref().map(|(_, c)| c.clone()));
            }
        }
        let container = self.runtime_for(sb).await?.inspect(&sb.id).await?;
        let client = match container {
            Some(c) if c.running && c.agent.is_some() => match (c.address, c.agent_addr) {
                // The agent where the sandbox's host lets this
                // server reach it (its bridge address, or a published port).
                (Some(ip), Some(at)) => {
                    let client =
                        AgentClient::new(Endpoint::Tcp(at), Some(self.agents.token(&sb.id)));
                    // Only a container that started a moment ago may still
                    // be bringing its agent up.
                    let fresh = c
                        .started_at
                        .is_none_or(|t| Utc::now() - t < chrono::Duration::seconds(5));
                    if fresh {
                        wait_until_ready(&client).await;
                    }
                    Some((ip, client))
                }
                _ => None,
            },
            _ => None,
        };
        let mut clients = self.agents.lock();
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(
            sb.id.clone(),
            Reached {
                started_at: sb.started_at,
                client: client.clone(),
            },
        );
        Ok(client.map(|(_, c)| c))
    }
}

fn endpoint(ip: IpAddr) -> Endpoint {
    Endpoint::Tcp(match ip {
        IpAddr::V6(v6) => format!("[{v6}]:{}", stockade_runtime::AGENT_PORT),
        v4 => format!("{v4}:{}", stockade_runtime::AGENT_PORT),
    })
}

/// Waits (up to two seconds) for a just-started agent to answer, so the
/// first command of a new sandbox does not race its start.
async fn wait_until_ready(client: &AgentClient) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while client.health().await.is_err() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
