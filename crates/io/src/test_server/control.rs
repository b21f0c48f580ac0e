//! The control port of the controlled server: what the Python test client sets and asks, on a
//! port of its own so that its connections and requests are never counted or recorded.
//!
//! | request | effect |
//! |---|---|
//! | `GET /requests` | the records, a JSON list |
//! | `GET /counters` | in flight, connections and their maxima, `now` (seconds since start) |
//! | `POST /script?path=P` | appends the steps of the body (a JSON list of objects) to `P`'s |
//! | `PUT /file?path=P[&etag=E][&last_modified=L]` | serves the body at `P` |
//! | `DELETE /file?path=P` | stops serving `P` |
//! | `PUT /defaults` | replaces the defaults with the body (a JSON object) |
//! | `POST /reset` | forgets records, counters, steps and maxima |
//!
//! Anything else, or a body that is not what is asked for, gets a 400 (404 for an unknown
//! route), never a panic.

use std::collections::VecDeque;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use dlrs_core::sync::lock;

use super::grammar::{File, Grammar, Params, Read, Request, head, read_request, simple};

/// A JSON object of strings (numbers and booleans are taken as their text).
fn params(value: &Value) -> Result<Params, String> {
    let Value::Object(map) = value else {
        return Err("expected a JSON object".into());
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            Value::Number(n) => Ok((k.clone(), n.to_string())),
            Value::Bool(b) => Ok((k.clone(), b.to_string())),
            _ => Err(format!("{k}: expected a string")),
        })
        .collect()
}

fn records(grammar: &Grammar) -> Value {
    let inner = lock(&grammar.inner);
    let records: Vec<Value> = inner
        .records
        .iter()
        .enumerate()
        .map(|(index, r)| {
            json!({
                "index": index,
                "method": r.method,
                "path": r.path,
                "target": r.target,
                "query": r.query,
                "headers": r.headers,
                "time": r.time,
                "connection": r.connection,
                "outcome": r.outcome,
                "params": r.params,
            })
        })
        .collect();
    Value::Array(records)
}

/// The answer to one control request: a status and a JSON body.
pub(super) fn answer(grammar: &Grammar, req: Request) -> Result<Value, (u16, String)> {
    let (path, query) = req.path_and_query();
    let bad = |e: String| (400, e);
    let target = || {
        query
            .get("path")
            .cloned()
            .ok_or_else(|| bad("path is missing".into()))
    };
    let body = || serde_json::from_slice::<Value>(&req.body).map_err(|e| bad(e.to_string()));
    match (req.method.as_str(), path.as_str()) {
        ("GET", "/requests") => return Ok(records(grammar)),
        ("GET", "/counters") => {
            let inner = lock(&grammar.inner);
            return Ok(json!({
                "in_flight": inner.in_flight,
                "max_in_flight": inner.max_in_flight,
                "open_connections": inner.open,
                "max_open_connections": inner.max_open,
                "connections_opened": inner.opened,
                "now": grammar.started.elapsed().as_secs_f64(),
            }));
        }
        ("POST", "/script") => {
            let path = target()?;
            let Value::Array(steps) = body()? else {
                return Err(bad("expected a JSON list of steps".into()));
            };
            let steps = steps.iter().map(params).collect::<Result<VecDeque<_>, _>>();
            let steps = steps.map_err(bad)?;
            lock(&grammar.inner)
                .scripts
                .entry(path)
                .or_default()
                .extend(steps);
        }
        ("PUT", "/file") => {
            let file = File {
                body: Bytes::from(req.body),
                etag: query.get("etag").cloned(),
                last_modified: query.get("last_modified").cloned(),
            };
            lock(&grammar.inner).files.insert(target()?, file);
        }
        ("DELETE", "/file") => {
            lock(&grammar.inner).files.remove(&target()?);
        }
        ("PUT", "/defaults") => {
            let defaults = params(&body()?).map_err(bad)?;
            lock(&grammar.inner).defaults = defaults;
        }
        ("POST", "/reset") => grammar.reset(),
        _ => return Err((404, format!("no control route {} {path}", req.method))),
    }
    Ok(json!({}))
}

/// Serves one connection of the control port.
pub(super) async fn serve(mut stream: TcpStream, grammar: &Grammar) {
    let mut buf = Vec::new();
    loop {
        let (out, keep_alive) = match read_request(&mut stream, &mut buf, None).await {
            Ok(Read::Request(req)) => {
                let keep_alive = req.keep_alive();
                let out = match answer(grammar, req) {
                    Ok(doc) => {
                        let body = doc.to_string();
                        let len = Some(body.len() as u64);
                        let mut out = head(200, len, keep_alive, &[], "application/json");
                        out.extend_from_slice(body.as_bytes());
                        out
                    }
                    Err((status, text)) => simple(status, &text, keep_alive),
                };
                (out, keep_alive)
            }
            Ok(Read::Bad(status, text)) => (simple(status, text, false), false),
            Ok(Read::Closed) | Err(_) => return,
        };
        if stream.write_all(&out).await.is_err() || !keep_alive {
            return;
        }
    }
}
