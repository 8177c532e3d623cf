//! Strait test and benchmark suite: no library code lives here; see `tests/` and `benches/`.
