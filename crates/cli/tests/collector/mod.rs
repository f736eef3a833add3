//! An OTLP profiles collector over gRPC for the push tests and bench/push_cost.sh: tonic's server with
//! opentelemetry-proto's generated ProfilesService, so requests are decoded exactly as a collector's gRPC
//! receiver does. Not a mock of whyslow: it only receives, keeps and answers as told.

use opentelemetry_proto::tonic::collector::profiles::v1development::{
    profiles_service_server::{ProfilesService, ProfilesServiceServer},
    ExportProfilesPartialSuccess, ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use std::sync::{Arc, Mutex};

/// A collector on a free port of 127.0.0.1, keeping every Export call with its metadata and answering
/// call N with `answer(N)`: Ok(rejected profiles, 0 for a full success) or a status code.
pub struct GrpcServer {
    pub url: String,
    seen: Calls,
    _rt: tokio::runtime::Runtime,
}

#[derive(Clone)]
pub struct GrpcCall {
    pub metadata: tonic::metadata::MetadataMap,
    pub request: ExportProfilesServiceRequest,
}

type Answer = Box<dyn Fn(usize) -> Result<i64, tonic::Code> + Send + Sync>;
/// Every call with what it was answered.
type Calls = Arc<Mutex<Vec<(GrpcCall, Result<i64, tonic::Code>)>>>;

struct Collector {
    seen: Calls,
    answer: Answer,
}

#[tonic::async_trait]
impl ProfilesService for Collector {
    async fn export(
        &self,
        r: tonic::Request<ExportProfilesServiceRequest>,
    ) -> Result<tonic::Response<ExportProfilesServiceResponse>, tonic::Status> {
        let call = GrpcCall { metadata: r.metadata().clone(), request: r.into_inner() };
        let mut seen = self.seen.lock().unwrap();
        let answer = (self.answer)(seen.len());
        seen.push((call, answer));
        match answer {
            Ok(rejected) => Ok(tonic::Response::new(ExportProfilesServiceResponse {
                partial_success: (rejected > 0).then(|| ExportProfilesPartialSuccess {
                    rejected_profiles: rejected,
                    error_message: "unknown sample type".into(),
                }),
            })),
            Err(code) => Err(tonic::Status::new(code, "told to fail")),
        }
    }
}

impl GrpcServer {
    pub fn start(answer: impl Fn(usize) -> Result<i64, tonic::Code> + Send + Sync + 'static) -> GrpcServer {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let l = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let svc = ProfilesServiceServer::new(Collector { seen: seen.clone(), answer: Box::new(answer) });
        rt.spawn(
            tonic::transport::Server::builder()
                .serve_with_incoming(svc, tonic::transport::server::TcpIncoming::from(l)),
        );
        GrpcServer { url, seen, _rt: rt }
    }

    pub fn calls(&self) -> Vec<(GrpcCall, Result<i64, tonic::Code>)> {
        self.seen.lock().unwrap().clone()
    }
}
