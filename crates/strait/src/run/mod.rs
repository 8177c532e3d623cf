//! The run loop: every flow, its mirror, topic and ACL sync, and hot reload.

pub mod acls;
pub mod flows;
pub mod memory;
pub mod mirror;
pub mod reload;
pub mod retry;
pub mod topics;
