//! OTLP profiles over gRPC: `opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export`
//! with the client opentelemetry-proto generates, over one HTTP/2 channel kept between sends (TLS for
//! https:// with the webpki roots). Sending stays blocking for the caller: a private current-thread tokio
//! runtime drives the channel only while a request is in flight. It must never retry by itself nor
//! classify a failure it did not see answered by the server as a refusal.

use crate::PushError;
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    profiles_service_client::ProfilesServiceClient, ExportProfilesServiceRequest,
    ExportProfilesServiceResponse,
};
use std::time::Duration;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

pub(crate) struct Client {
    url: String,
    rt: tokio::runtime::Runtime,
    client: ProfilesServiceClient<Channel>,
    metadata: MetadataMap,
    timeout: Duration,
}

impl Client {
    /// A client of the collector at `url` sending `headers` (lowercase names) as metadata. Nothing is
    /// connected yet: the first export connects, and reconnects after a failure.
    pub fn new(
        url: &str,
        headers: &[(&'static str, String)],
        timeout: Duration,
    ) -> Result<Client, PushError> {
        let mut metadata = MetadataMap::new();
        for (k, v) in headers {
            let v = MetadataValue::try_from(v.as_str()).map_err(|_| {
                PushError::Refused(format!("{url}: the {k} value is not a valid gRPC metadata value"))
            })?;
            metadata.insert(MetadataKey::from_static(k), v);
        }
        let endpoint = Endpoint::new(url.to_string())
            .map_err(|e| PushError::Refused(format!("{url}: {e}")))?
            .user_agent(concat!("whyslow/", env!("CARGO_PKG_VERSION")))
            .map_err(|e| PushError::Refused(format!("{url}: {e}")))?
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .timeout(timeout);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PushError::Retry(format!("{url}: cannot start the gRPC runtime: {e}")))?;
        // The channel spawns its worker on the runtime it is made in.
        let channel = {
            let _in = rt.enter();
            endpoint.connect_lazy()
        };
        Ok(Client {
            url: url.to_string(),
            rt,
            client: ProfilesServiceClient::new(channel),
            metadata,
            timeout,
        })
    }

    /// One unary Export call.
    pub fn export(
        &mut self,
        req: ExportProfilesServiceRequest,
    ) -> Result<ExportProfilesServiceResponse, PushError> {
        let mut r = tonic::Request::new(req);
        *r.metadata_mut() = self.metadata.clone();
        // grpc-timeout: the server gives up too, instead of working for a client that left.
        r.set_timeout(self.timeout);
        self.rt
            .block_on(self.client.export(r))
            .map(tonic::Response::into_inner)
            .map_err(|s| classify(&self.url, &s))
    }
}

/// Refuse only what the server says is malformed (INVALID_ARGUMENT): the window is dropped. Everything
/// else may succeed later and is retried with the queue kept: OTLP's retryable codes, RESOURCE_EXHAUSTED
/// (back-pressure), and UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND, UNIMPLEMENTED (rotated
/// credentials, a proxy, a collector being redeployed) which are outages, not verdicts on the data.
fn classify(url: &str, s: &Status) -> PushError {
    let m = format!("{url}: gRPC {:?} ({}): {}", s.code(), s.code() as i32, s.message().trim());
    // A status made here from a local error (connect, TLS, client timeout, reset stream): the server
    // never answered, so its code says nothing about the request.
    if std::error::Error::source(s).is_some() {
        return PushError::Retry(m);
    }
    match s.code() {
        Code::InvalidArgument => PushError::Refused(m),
        _ => PushError::Retry(m),
    }
}

#[cfg(test)]
mod tests {
    use super::{classify, Client, ExportProfilesServiceRequest};
    use crate::PushError;
    use std::time::Duration;
    use tonic::Code;
    use tonic::Status;

    #[test]
    fn server_codes_split_into_retry_and_refused_and_no_answer_is_retried() {
        let retry = |s: Status| matches!(classify("u", &s), PushError::Retry(_));
        // Issue 32 #6: credentials, permissions and missing services are outages: the queue is kept.
        for code in [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::NotFound,
            Code::Unimplemented,
            Code::Internal,
            Code::Unknown,
        ] {
            assert!(retry(Status::new(code, "x")), "{code:?}");
        }
        // Only a request the server calls malformed is dropped.
        assert!(!retry(Status::new(Code::InvalidArgument, "x")));
        // An Unknown status tonic made from a local failure carries it as its source.
        let local = Status::from_error(Box::new(std::io::Error::other("connection reset")));
        assert_eq!(local.code(), Code::Unknown);
        assert!(retry(local));
    }

    #[test]
    fn a_closed_port_is_retried_and_bad_metadata_refused() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let mut c = Client::new(&url, &[], Duration::from_secs(5)).unwrap();
        match c.export(ExportProfilesServiceRequest::default()) {
            Err(PushError::Retry(m)) => assert!(m.contains("Unavailable"), "{m}"),
            other => panic!("{other:?}"),
        }
        let bad = Client::new(&url, &[("authorization", "Bearer a\nb".into())], Duration::from_secs(5));
        assert!(matches!(bad, Err(PushError::Refused(m)) if m.contains("authorization")));
    }
}
