//! The copies of record bytes the pipeline makes, visible to tests.
//!
//! How many times a batch's records are copied in user space between the fetch response and
//! the socket is part of the design (the mirror's CPU per GB is mostly copies): today exactly
//! one, when a pass-through batch gets a buffer of its own (`partition::own`, so that it stops
//! pinning the whole fetch response), after which it is stamped in place and written from that
//! buffer (strait-wire's encoder and writer pin their side: no copy). Every place in the
//! pipeline that copies a batch reports it here; a test thread that [`watch`]es sees each copy
//! as (from, to) address ranges, and checks that the bytes the target gets are the copy's
//! destination, so a new copy anywhere fails a test instead of a benchmark.
//!
//! Debug builds only: in release builds [`record`] compiles to nothing and a watch sees nothing.

use std::cell::RefCell;
use std::ops::Range;

/// One copy: the source bytes' and the destination's address ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordCopy {
    /// Where the bytes were.
    pub from: Range<usize>,
    /// Where they were copied to.
    pub to: Range<usize>,
}

thread_local! {
    /// The copies seen while this thread is watched (`None`: not watched, nothing recorded).
    static WATCHED: RefCell<Option<Vec<RecordCopy>>> = const { RefCell::new(None) };
}

/// Records the copies made on this thread (a current-thread runtime runs every pipeline task on
/// it) until the guard is dropped.
#[must_use = "copies are recorded only while the guard lives"]
pub fn watch() -> CopyWatch {
    WATCHED.with(|w| *w.borrow_mut() = Some(Vec::new()));
    CopyWatch {
        _not_send: std::marker::PhantomData,
    }
}

/// See [`watch`].
#[derive(Debug)]
pub struct CopyWatch {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl CopyWatch {
    /// The copies recorded so far, in order.
    pub fn copies(&self) -> Vec<RecordCopy> {
        WATCHED.with(|w| w.borrow().clone().unwrap_or_default())
    }
}

impl Drop for CopyWatch {
    fn drop(&mut self) {
        WATCHED.with(|w| *w.borrow_mut() = None);
    }
}

/// Reports a copy of record bytes from `from` to `to`.
#[inline]
pub(crate) fn record(from: &[u8], to: &[u8]) {
    #[cfg(debug_assertions)]
    WATCHED.with(|w| {
        if let Some(copies) = w.borrow_mut().as_mut() {
            copies.push(RecordCopy {
                from: from.as_ptr_range().start as usize..from.as_ptr_range().end as usize,
                to: to.as_ptr_range().start as usize..to.as_ptr_range().end as usize,
            });
        }
    });
    #[cfg(not(debug_assertions))]
    let _ = (from, to);
}
