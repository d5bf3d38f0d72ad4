//! The node's HTTP routes: `/metrics` and the JSON control API under `/api/v1`.

use serde::de::DeserializeOwned;

use super::server::{Handler, HandlerFuture};
use super::wire::{Request, Response, decode_segment};
use crate::api::{AllowAnyHostRequest, AttachRequest, CreateNamespaceRequest, HostRequest};
use crate::node::{ErrorKind, NodeError, StorageNode};

pub(crate) struct NodeHandler {
    node: StorageNode,
}

impl NodeHandler {
    pub(crate) fn new(node: StorageNode) -> NodeHandler {
        NodeHandler { node }
    }
}

impl Handler for NodeHandler {
    fn handle(&self, req: Request) -> HandlerFuture {
        let node = self.node.clone();
        Box::pin(async move { route(node, req).await })
    }
}

fn status_of(e: &NodeError) -> u16 {
    match e.kind() {
        ErrorKind::BadRequest => 400,
        ErrorKind::NotFound => 404,
        ErrorKind::Conflict => 409,
        ErrorKind::InsufficientCapacity => 507,
        ErrorKind::Internal => 500,
    }
}

fn error(e: &NodeError) -> Response {
    Response::error(status_of(e), &e.to_string())
}

fn body<T: DeserializeOwned>(req: &Request) -> Result<T, Response> {
    serde_json::from_slice(&req.body)
        .map_err(|e| Response::error(400, &format!("bad JSON body: {e}")))
}

fn nsid_of(s: &str) -> Result<u32, Response> {
    s.parse()
        .map_err(|_| Response::error(400, &format!("bad namespace ID {s:?}")))
}

fn reply<T: serde::Serialize>(status: u16, r: Result<T, NodeError>) -> Response {
    match r {
        Ok(v) => Response::json(status, &v),
        Err(e) => error(&e),
    }
}

async fn route(node: StorageNode, req: Request) -> Response {
    match route_inner(node, &req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn route_inner(node: StorageNode, req: &Request) -> Result<Response, Response> {
    if req.path == "/metrics" {
        return match req.method.as_str() {
            "GET" => Ok(Response::new(
                200,
                super::metrics::CONTENT_TYPE,
                super::metrics::render(&node),
            )),
            _ => Err(Response::error(405, "use GET")),
        };
    }
    let Some(rest) = req.path.strip_prefix(crate::api::API_PREFIX) else {
        return Err(Response::error(404, &format!("no such path {}", req.path)));
    };
    let segs: Vec<String> = rest
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_segment)
        .collect::<Result<_, _>>()
        .map_err(|e| Response::error(e.status, &e.message))?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let m = req.method.as_str();
    let not_allowed = || {
        Err(Response::error(
            405,
            &format!("{m} is not allowed on {}", req.path),
        ))
    };
    match segs.as_slice() {
        ["node"] => match m {
            "GET" => Ok(Response::json(200, &node.info())),
            _ => not_allowed(),
        },
        ["health"] => match m {
            "GET" => Ok(Response::json(200, &node.health())),
            _ => not_allowed(),
        },
        ["namespaces"] => match m {
            "GET" => Ok(Response::json(200, &node.list_namespaces())),
            "POST" => {
                let r: CreateNamespaceRequest = body(req)?;
                Ok(reply(201, node.create_namespace(r).await))
            }
            _ => not_allowed(),
        },
        ["namespaces", nqn, nsid] => {
            let nsid = nsid_of(nsid)?;
            match m {
                "GET" => Ok(reply(200, node.namespace(nqn, nsid))),
                "DELETE" => Ok(reply(
                    200,
                    node.delete_namespace(nqn, nsid)
                        .await
                        .map(|()| serde_json::json!({})),
                )),
                _ => not_allowed(),
            }
        }
        ["namespaces", nqn, nsid, action @ ("attach" | "detach")] => {
            let nsid = nsid_of(nsid)?;
            if m != "POST" {
                return not_allowed();
            }
            let r: AttachRequest = body(req)?;
            let result = if *action == "attach" {
                node.attach_namespace(nqn, nsid, r).await
            } else {
                node.detach_namespace(nqn, nsid, r).await
            };
            Ok(reply(200, result))
        }
        ["subsystems"] => match m {
            "GET" => Ok(Response::json(200, &node.subsystems())),
            _ => not_allowed(),
        },
        ["subsystems", nqn, "hosts"] => match m {
            "POST" => {
                let r: HostRequest = body(req)?;
                Ok(reply(200, node.allow_host(nqn, &r.host_nqn).await))
            }
            _ => not_allowed(),
        },
        ["subsystems", nqn, "hosts", host] => match m {
            "DELETE" => Ok(reply(200, node.deny_host(nqn, host).await)),
            _ => not_allowed(),
        },
        ["subsystems", nqn, "allow_any_host"] => match m {
            "PUT" => {
                let r: AllowAnyHostRequest = body(req)?;
                Ok(reply(
                    200,
                    node.set_allow_any_host(nqn, r.allow_any_host).await,
                ))
            }
            _ => not_allowed(),
        },
        _ => Err(Response::error(404, &format!("no such path {}", req.path))),
    }
}
