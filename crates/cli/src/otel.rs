//! OpenTelemetry export: when the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, the gateway's spans
//! ([`plangate_gateway::telemetry`]) go to that collector over OTLP
//! HTTP/protobuf, batched; the other `OTEL_*` variables the SDK reads
//! (headers, timeouts, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_BSP_*`) apply as usual. `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` keeps it off.
//!
//! The exporter sends with plangate's own HTTP client (reqwest, rustls),
//! its requests run on the process's tokio runtime: the SDK's batch
//! processor exports from a thread of its own.

use anyhow::{Result, anyhow};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

fn set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

fn says(var: &str, value: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v.trim().eq_ignore_ascii_case(value))
}

/// Whether the environment asks for traces.
pub fn wanted() -> bool {
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        && !says("OTEL_SDK_DISABLED", "true")
        && !says("OTEL_TRACES_EXPORTER", "none")
}

/// Sends the exporter's requests with reqwest, on the runtime.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let sent = self.handle.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            let mut out = Response::new(body);
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok::<_, reqwest::Error>(out)
        });
        Ok(sent.await??)
    }
}

/// The tracer provider exporting to the collector the environment names.
/// Shut it down before the process ends, so the last spans go out.
pub fn provider(handle: tokio::runtime::Handle) -> Result<SdkTracerProvider> {
    if set("OTEL_EXPORTER_OTLP_PROTOCOL") && !says("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf") {
        return Err(anyhow!(
            "OTEL_EXPORTER_OTLP_PROTOCOL asks for something plangate does not send: it exports OTLP over HTTP (http/protobuf), so point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (usually 4318) and unset OTEL_EXPORTER_OTLP_PROTOCOL"
        ));
    }
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OnRuntime { client, handle })
        .build()?;
    let mut resource = Resource::builder();
    if !set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name("plangate");
    }
    let resource = resource
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}
