//! Produce: raw record-batch bytes per partition.

/// A per-record error from a Produce response (v8+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Index of the record inside the batch.
    pub batch_index: i32,
    /// The broker's message for it.
    pub message: Option<String>,
}
