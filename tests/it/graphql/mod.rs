//! The GraphQL API over real HTTP and WebSocket against real PostgreSQL.

mod auth_matrix;
mod drain;
mod limits;
mod mutations;
mod portal;
mod queries;
mod revocation;
mod subscriptions;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{Message, client::IntoClientRequest, protocol::CloseFrame},
};

use crate::api::App;

/// An HTTP GraphQL answer.
pub struct Answer {
    pub status: StatusCode,
    pub content_type: String,
    pub body: Value,
    pub text: String,
}

/// POSTs a GraphQL request with an optional bearer token.
pub async fn gql(app: &App, token: Option<&str>, query: &str, variables: Value) -> Answer {
    let mut request = app
        .http
        .post(format!("{}/graphql", app.base))
        .json(&json!({"query": query, "variables": variables}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    answer(request.send().await.unwrap()).await
}

/// Reads an HTTP answer.
pub async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
    Answer {
        status,
        content_type,
        body,
        text,
    }
}

/// `data` of a successful answer (no errors).
pub async fn data(app: &App, token: &str, query: &str, variables: Value) -> Value {
    let a = gql(app, Some(token), query, variables).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert!(a.body.get("errors").is_none(), "{}", a.text);
    a.body["data"].clone()
}

/// The global id the API gives a control plane.
pub fn control_plane_gid(slug: &str, id: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("ControlPlane:{slug}:{id}"))
}

pub type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a WebSocket to `/graphql` with `protocol`, over a socket with a small receive buffer (so that a
/// client that does not read is noticed quickly).
pub async fn ws_open(app: &App, protocol: &str) -> Ws {
    let addr: std::net::SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let mut request = format!("ws://{addr}/graphql").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", protocol.parse().unwrap());
    let (ws, response) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream))
        .await
        .unwrap();
    assert_eq!(
        response.headers()["sec-websocket-protocol"].to_str().unwrap(),
        protocol
    );
    ws
}

/// Sends a JSON message.
pub async fn ws_send(ws: &mut Ws, message: Value) {
    ws.send(Message::Text(message.to_string().into())).await.unwrap();
}

/// What arrives next: a JSON message, or the close frame's code and reason.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Json(Value),
    Closed(u16, String),
}

/// The next text or close message within `timeout` (pings and pongs skipped).
pub async fn ws_next(ws: &mut Ws, timeout: Duration) -> Incoming {
    loop {
        let message = tokio::time::timeout(timeout, ws.next())
            .await
            .expect("a WebSocket message in time");
        match message {
            Some(Ok(Message::Text(t))) => return Incoming::Json(serde_json::from_str(t.as_str()).unwrap()),
            Some(Ok(Message::Close(frame))) => {
                let (code, reason) = frame
                    .map(|f: CloseFrame| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                return Incoming::Closed(code, reason);
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Incoming::Closed(1006, e.to_string()),
            None => return Incoming::Closed(1006, "stream ended".into()),
        }
    }
}

/// Connects with `graphql-transport-ws`, initialises with `token` and expects the acknowledgement.
pub async fn ws_ready(app: &App, token: &str) -> Ws {
    let mut ws = ws_open(app, "graphql-transport-ws").await;
    ws_send(
        &mut ws,
        json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Json(json!({"type": "connection_ack"}))
    );
    ws
}

/// Sends a `ping` and waits for its `pong` (every message sent before it has been let through or
/// refused); the types of the messages that came first.
pub async fn settled(ws: &mut Ws) -> Vec<String> {
    ws_send(ws, json!({"type": "ping"})).await;
    let mut before = Vec::new();
    loop {
        match ws_next(ws, Duration::from_secs(10)).await {
            Incoming::Json(m) if m["type"] == "pong" => return before,
            Incoming::Json(m) => before.push(m["type"].as_str().unwrap_or_default().to_string()),
            closed => panic!("closed: {closed:?}"),
        }
    }
}

/// The subscription the tests use.
pub const EVENTS: &str = "subscription($t: String!) { controlPlaneEvents(tenant: $t) { controlPlane { name phase endpoint conditions { type status reason message } } } }";

/// Starts `EVENTS` for `slug` as subscription `id`.
pub async fn subscribe(ws: &mut Ws, id: &str, slug: &str) {
    ws_send(
        ws,
        json!({"id": id, "type": "subscribe", "payload": {"query": EVENTS, "variables": {"t": slug}}}),
    )
    .await;
}
