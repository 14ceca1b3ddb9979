//! OpenTelemetry traces, received over real OTLP/HTTP by a receiver built
//! here from the OpenTelemetry protocol's own message types: an agent's
//! planned write through one plangate ("outer"), the operator's apply of
//! it through `plangate plans apply`, and the call it makes to an HTTP
//! upstream that is itself a plangate ("inner") in front of the demo site.
//! The spans follow the MCP semantic conventions, carry the plan digest and
//! step id that link plan and apply, continue the agent's trace from its
//! `_meta.traceparent`, reach the HTTP upstream through `_meta` — and never
//! hold an argument value.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, MetaObject, RequestMetaObject,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::json;

/// What the receiver got: every span, with the process that sent it, and
/// every body as received.
#[derive(Default)]
struct Received {
    spans: Vec<(String, Span)>,
    bodies: Vec<u8>,
}

/// An OTLP/HTTP receiver on a free loopback port: `POST /v1/traces` with
/// an `ExportTraceServiceRequest`.
async fn receiver() -> (String, Arc<Mutex<Received>>, tokio::task::JoinHandle<()>) {
    let got = Arc::new(Mutex::new(Received::default()));
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
                let mut got = sink.lock().unwrap();
                got.bodies.extend_from_slice(&body);
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .iter()
                        .flat_map(|r| r.attributes.iter())
                        .find(|kv| kv.key == "service.instance.name" || kv.key == "service.name")
                        .map(|kv| format!("{:?}", kv.value))
                        .unwrap_or_default();
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            got.spans.push((service.clone(), span));
                        }
                    }
                }
                // An empty ExportTraceServiceResponse.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, got, task)
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
        .map(|v| match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(i) => i.to_string(),
            AnyValue::BoolValue(b) => b.to_string(),
            other => format!("{other:?}"),
        })
}

/// `plangate` with the collector set, as each process of the test runs.
fn traced(scratch: &Scratch, args: &[&str], collector: &str, service: &str) -> Command {
    let mut cmd = scratch.command(args);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_SERVICE_NAME", service)
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL");
    cmd
}

/// Stops a server the way an operator does (SIGTERM), so it flushes.
fn stop(proc: &mut Proc) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(proc.child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if proc.child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("plangate did not stop on SIGTERM:\n{}", proc.log());
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CANARY: &str = "canary-7f3a9c-tagline";

// The receiver must answer while the test waits on processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_write_and_its_apply_arrive_as_linked_spans_without_argument_values() {
    let (collector, got, receiver_task) = receiver().await;

    // Inner: a plangate in front of the demo site, over HTTP.
    let inner_scratch = Scratch::new();
    let inner_config = demo_config(&inner_scratch, "");
    let outer_token = inner_scratch.create_key("outer", "write");
    let mut inner = Proc::start(
        traced(
            &inner_scratch,
            &["serve", "--http", "127.0.0.1:0", "--config", &inner_config],
            &collector,
            "inner",
        ),
        "plangate serving ",
    );

    // Outer: a plangate with the inner one as its HTTP upstream.
    let outer_scratch = Scratch::new();
    let outer_config = outer_scratch.write(
        "outer.toml",
        &format!(
            "[upstreams.site]\nurl = \"{}\"\nheaders = {{ Authorization = \"Bearer {outer_token}\" }}\n",
            inner.url()
        ),
    );
    let outer_config = outer_config.to_str().unwrap().to_owned();
    let agent_token = outer_scratch.create_key("agent", "plan");
    let mut outer = Proc::start(
        traced(
            &outer_scratch,
            &["serve", "--http", "127.0.0.1:0", "--config", &outer_config],
            &collector,
            "outer",
        ),
        "plangate serving ",
    );

    let step_id = plan_in_the_agents_trace(&outer.url(), &agent_token).await;

    // The operator applies it, through the CLI (a traced process too).
    let out = traced(
        &outer_scratch,
        &[
            "plans",
            "apply",
            "--key",
            "agent",
            "--digest",
            &shown_digest(&outer_scratch, "agent"),
            "--config",
            &outer_config,
        ],
        &collector,
        "operator",
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(
        site_state(&inner_scratch.path().join("site.json"))["options"]["tagline"]["value"],
        CANARY,
        "the write reached the demo site through both plangates"
    );

    stop(&mut outer);
    stop(&mut inner);
    receiver_task.abort();
    // Shown when an assertion below fails.
    eprintln!(
        "outer:\n{}\ninner:\n{}\noperator:\n{}",
        outer.log(),
        inner.log(),
        stderr(&out)
    );

    let got = got.lock().unwrap();
    let spans = Spans::of(&got);
    let digest = the_planned_write_names_its_step_in_the_agents_trace(&spans, &step_id);
    let call = the_apply_names_the_same_plan_and_step(&spans, &digest, &step_id);
    the_http_upstream_continues_the_trace(&spans, call);

    // No argument value, key or session id in anything sent.
    let sent = String::from_utf8_lossy(&got.bodies);
    assert!(!sent.contains(CANARY), "an argument value reached a span");
    assert!(!sent.contains(&agent_token) && !sent.contains(&outer_token));
    let mut kinds: HashMap<&str, usize> = HashMap::new();
    for (service, _) in &got.spans {
        *kinds.entry(service.as_str()).or_default() += 1;
    }
    assert!(
        kinds.len() >= 3,
        "spans from all three processes: {kinds:?}"
    );
}

/// The agent's planned write of the canary tagline through `url` with
/// `token`, in its own trace (`_meta.traceparent` of [`TRACE_ID`]): the
/// step's id.
async fn plan_in_the_agents_trace(url: &str, token: &str) -> String {
    let agent = http_client(url, Some(token)).await.unwrap();
    let mut meta = serde_json::Map::new();
    meta.insert(
        "traceparent".into(),
        json!(format!("00-{TRACE_ID}-00f067aa0ba902b7-01")),
    );
    let mut params = CallToolRequestParams::new("update_option");
    params.arguments = json!({"name": "tagline", "value": CANARY})
        .as_object()
        .cloned();
    let answer = agent
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options().with_meta(RequestMetaObject(MetaObject(meta))),
        )
        .await
        .unwrap()
        .await_response()
        .await
        .unwrap();
    let ServerResult::CallToolResult(planned) = answer else {
        panic!("{answer:?}")
    };
    let planned = body(&planned);
    assert_eq!(planned["planned"], true, "{planned}");
    let step_id = planned["step_id"].as_str().unwrap().to_owned();
    agent.cancel().await.unwrap();
    step_id
}

/// Bytes as lowercase hex, as trace and span ids are written.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The spans received, by the process that sent them, and a listing of
/// them all for failure messages: who sent what.
struct Spans<'a> {
    spans: &'a [(String, Span)],
    listed: Vec<String>,
}

impl<'a> Spans<'a> {
    fn of(got: &'a Received) -> Spans<'a> {
        let listed = got
            .spans
            .iter()
            .map(|(s, span)| {
                format!(
                    "{s} {} kind={} span={} parent={}",
                    span.name,
                    span.kind,
                    hex(&span.span_id),
                    hex(&span.parent_span_id)
                )
            })
            .collect();
        Spans {
            spans: &got.spans,
            listed,
        }
    }

    /// The spans `name` that `service` sent.
    fn named(&self, service: &str, name: &str) -> Vec<&'a Span> {
        self.spans
            .iter()
            .filter(|(s, span)| s.contains(service) && span.name == name)
            .map(|(_, span)| span)
            .collect()
    }

    /// The first span `name` of `service` of `kind` (2 server, 3 client)
    /// that `also` holds for; what is missing is `missing`.
    fn find(
        &self,
        service: &str,
        name: &str,
        kind: i32,
        also: impl Fn(&Span) -> bool,
        missing: &str,
    ) -> &'a Span {
        self.named(service, name)
            .into_iter()
            .find(|s| s.kind == kind && also(s))
            .unwrap_or_else(|| panic!("{missing}: {:#?}", self.listed))
    }
}

/// The planned write: a server span in the agent's trace, saying which
/// step it planned in which plan. Returns the plan's digest.
fn the_planned_write_names_its_step_in_the_agents_trace(spans: &Spans, step_id: &str) -> String {
    let planning = spans.find(
        "outer",
        "tools/call update_option",
        2,
        |_| true,
        "no server span for the planned write",
    );
    assert_eq!(
        hex(&planning.trace_id),
        TRACE_ID,
        "the agent's trace goes on"
    );
    assert_eq!(hex(&planning.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(
        attr(planning, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attr(planning, "gen_ai.tool.name").as_deref(),
        Some("update_option")
    );
    assert_eq!(
        attr(planning, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(attr(planning, "network.transport").as_deref(), Some("tcp"));
    assert!(attr(planning, "jsonrpc.request.id").is_some());
    assert_eq!(attr(planning, "mcp.session.id").map(|s| s.len()), Some(16));
    assert_eq!(attr(planning, "plangate.step.id").as_deref(), Some(step_id));
    attr(planning, "plangate.plan.digest").unwrap()
}

/// The apply: its span names the same plan, its step span the same step,
/// and the step's call to the upstream is a client span under it, which
/// is returned.
fn the_apply_names_the_same_plan_and_step<'a>(
    spans: &Spans<'a>,
    digest: &str,
    step_id: &str,
) -> &'a Span {
    let applies = spans.named("operator", "apply_plan");
    let apply = applies
        .first()
        .unwrap_or_else(|| panic!("no apply span: {:#?}", spans.listed));
    assert_eq!(attr(apply, "plangate.plan.digest").as_deref(), Some(digest));
    let step = spans.named("operator", "apply step");
    let step = step.first().unwrap();
    assert_eq!(attr(step, "plangate.step.id").as_deref(), Some(step_id));
    assert_eq!(step.parent_span_id, apply.span_id);
    let call = spans.find(
        "operator",
        "tools/call update_option",
        3,
        |s| s.parent_span_id == step.span_id,
        "no client span under the step",
    );
    assert_eq!(attr(call, "network.transport").as_deref(), Some("tcp"));
    assert_eq!(attr(call, "plangate.upstream").as_deref(), Some("site"));
    call
}

/// The HTTP upstream continued the trace of `call` from its `_meta`, and
/// called the demo site (a child process) under it.
fn the_http_upstream_continues_the_trace(spans: &Spans, call: &Span) {
    let served_by_inner = spans.find(
        "inner",
        "tools/call update_option",
        2,
        |_| true,
        "no server span in the inner plangate",
    );
    assert_eq!(served_by_inner.trace_id, call.trace_id);
    assert_eq!(served_by_inner.parent_span_id, call.span_id);
    let to_site = spans.find(
        "inner",
        "tools/call update_option",
        3,
        |_| true,
        "no client span to the demo site",
    );
    assert_eq!(to_site.parent_span_id, served_by_inner.span_id);
    assert_eq!(attr(to_site, "network.transport").as_deref(), Some("pipe"));
}
