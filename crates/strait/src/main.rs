//! `strait`: the Kafka cross-cluster mirror binary.

fn main() {
    println!("strait {}", env!("CARGO_PKG_VERSION"));
}
