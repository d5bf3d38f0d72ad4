//! The cluster's API token: one bearer token every processor node's API and every
//! storage node of the cluster require, kept in the metadata store at [`API_TOKEN_KEY`]
//! (made by the first node that needs it). Whoever can read the store already controls
//! the cluster, so the token adds no secret there; it keeps the HTTP APIs closed to
//! everyone else. An operator may give a node another token (flag or environment).

use meta::schema::{TypedCas, cas_json, get_json};
use meta::{Expect, MetaStore};
use serde::{Deserialize, Serialize};
use storage_node::NodeClient;

use httpapi::auth::Token;

use crate::error::ControlError;
use crate::records::NodeRecord;

/// `/ferrobay/api-token` (no lease): `{"token": "..."}`.
pub const API_TOKEN_KEY: &str = "/ferrobay/api-token";

#[derive(Serialize, Deserialize)]
struct TokenRecord {
    token: String,
}

/// The cluster's token, made and stored on first use (one wins if several race).
pub async fn cluster_token(store: &dyn MetaStore) -> Result<Token, ControlError> {
    let bad = |e: httpapi::auth::TokenError| {
        ControlError::Invalid(format!("the token at {API_TOKEN_KEY} is unusable: {e}"))
    };
    if let Some(v) = get_json::<TokenRecord, _>(store, API_TOKEN_KEY).await? {
        return Token::new(&v.value.token).map_err(bad);
    }
    let fresh = Token::generate();
    let rec = TokenRecord {
        token: fresh.as_str().to_string(),
    };
    match cas_json(store, API_TOKEN_KEY, Expect::Absent, &rec, None).await? {
        TypedCas::Swapped { .. } => Ok(fresh),
        TypedCas::Conflict { current: Some(c) } => Token::new(&c.value.token).map_err(bad),
        TypedCas::Conflict { current: None } => Err(ControlError::Conflict(format!(
            "{API_TOKEN_KEY} changed while it was being made; try again"
        ))),
    }
}

/// A client of a storage node's API with the cluster's token.
pub async fn node_client(
    store: &dyn MetaStore,
    node: &NodeRecord,
) -> Result<NodeClient, ControlError> {
    api_addr(node)?;
    node_client_with(node, &cluster_token(store).await?)
}

/// A client of a storage node's API with `token` (the cluster's, read once for many
/// nodes).
pub fn node_client_with(node: &NodeRecord, token: &Token) -> Result<NodeClient, ControlError> {
    Ok(NodeClient::new(api_addr(node)?.to_string()).with_token(Some(token.as_str().to_string())))
}

fn api_addr(node: &NodeRecord) -> Result<std::net::SocketAddr, ControlError> {
    node.api_addr.ok_or_else(|| {
        ControlError::storage(
            &node.name,
            "registered without an HTTP API address (start the node with an HTTP listener)",
        )
    })
}
