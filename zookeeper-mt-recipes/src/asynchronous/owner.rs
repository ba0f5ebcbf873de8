//! What makes a recipe value cheap to clone: its state lives behind `Arc`s, and its
//! background task (if any) behind one [`SharedTask`] that every clone holds.

use std::sync::Arc;

use crate::runtime::Task;

/// A recipe value's background task, shared by its clones: dropping the last clone
/// cancels it (returning at once, the task ending on the driver); an explicit
/// [`stop_and_join`](Self::stop_and_join) on any clone stops it for all of them.
#[derive(Debug, Clone)]
pub(crate) struct SharedTask(Arc<CancelOnDrop>);

#[derive(Debug)]
struct CancelOnDrop(Task);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl SharedTask {
    pub(crate) fn new(task: Task) -> SharedTask {
        SharedTask(Arc::new(CancelOnDrop(task)))
    }

    /// Stops the task and waits for its end (see [`Task::join`]).
    pub(crate) fn stop_and_join(&self) {
        self.0 .0.stop_and_join();
    }
}
