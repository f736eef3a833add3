//! The OTLP gRPC sink of bench/push_cost.sh: the push tests' collector (decodes every Export as a
//! collector's gRPC receiver does, answers success), its URL on stdout; runs until killed.

// The sink only answers: what the tests read of the calls goes unused here.
#[allow(dead_code)]
#[path = "../tests/collector/mod.rs"]
mod collector;

fn main() {
    let sink = collector::GrpcServer::start(|_| Ok(0));
    println!("{}", sink.url);
    loop {
        std::thread::park();
    }
}
