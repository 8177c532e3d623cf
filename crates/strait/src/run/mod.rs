//! The run loop: every flow, its mirror, topic and ACL sync, and hot reload.

pub(crate) mod acls;
pub mod flows;
pub(crate) mod group_timeouts;
pub mod memory;
pub(crate) mod mirror;
pub mod reload;
pub(crate) mod retry;
pub(crate) mod topic_creation;
pub(crate) mod topic_gate;
pub(crate) mod topics;
