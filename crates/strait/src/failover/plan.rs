//! The step plan shared by `strait switchover` and `strait failback`, and the driver that
//! carries one out.
//!
//! A command reads the state of both clusters (no local state), a pure planner turns it into
//! [`Step`]s, each already [`Done`](StepState::Done), with [`Action`]s still to do, waiting for
//! the operator, or refused. The driver waits while a step waits, executes the actions in
//! order, then reads the clusters again: every step checks whether it is done from what is on
//! the clusters, so a command interrupted anywhere continues where it stopped when run again.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use strait_wire::TopicPartition;
use strait_wire::offset_commit::CommitOffset;

use super::format::Checkpoint;
use super::records::StrandedRecord;

pub use crate::error::HandoverError;

/// Which cluster of the flow an action writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The flow's `[source]`.
    Source,
    /// The flow's `[target]`.
    Target,
}

/// A change to one of the clusters (or a file).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Append these checkpoints to the flow's checkpoints topic on the target.
    WriteCheckpoints(Vec<Checkpoint>),
    /// Commit offsets for `group` on one cluster (without membership: the group is empty).
    Commit {
        /// Where.
        side: Side,
        /// The group.
        group: String,
        /// The offsets, with metadata.
        offsets: Vec<CommitOffset>,
    },
    /// Append `records` (read from the old source) to partition `to` on the target.
    Copy {
        /// The target partition.
        to: TopicPartition,
        /// The records, in source order.
        records: Vec<StrandedRecord>,
    },
    /// Write `records` to `file` as JSON lines (the whole file, replaced atomically).
    Export {
        /// The file.
        file: PathBuf,
        /// Every stranded record, in partition and offset order.
        records: Vec<StrandedRecord>,
    },
}

/// A step's state as read from the clusters.
#[derive(Debug, Clone, PartialEq)]
pub enum StepState {
    /// Nothing left to do.
    Done,
    /// These actions make it done.
    Todo(Vec<Action>),
    /// Waits for the operator (or the mirror); the detail says for what.
    Waiting,
    /// Cannot be done; the detail says why and what to do.
    Refused,
    /// An earlier step is not done yet.
    Blocked,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Short name (also what `STRAIT_HANDOVER_EXIT_AFTER` names).
    pub name: &'static str,
    /// Its state.
    pub state: StepState,
    /// What was found, what is done or awaited, in words.
    pub detail: String,
    /// Computed from state that an earlier step, while it waits, still moves (the mirror's
    /// progress, a group's commits): judged only once no earlier step waits. See [`Plan::push`].
    pub reads_moving_state: bool,
}

impl Step {
    /// A step in `state`.
    pub fn new(name: &'static str, state: StepState, detail: impl Into<String>) -> Step {
        Step {
            name,
            state,
            detail: detail.into(),
            reads_moving_state: false,
        }
    }

    /// The same step, marked as computed from state an earlier waiting step still moves.
    pub fn reading_moving_state(mut self) -> Step {
        self.reads_moving_state = true;
        self
    }
}

/// The steps of a command, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The steps.
    pub steps: Vec<Step>,
}

impl Plan {
    /// Appends `step`, [`StepState::Blocked`] instead of its own state when
    /// * it has actions and an earlier step waits or is refused (they would rest on a state
    ///   that is still moving, or be done for a command that stops), or
    /// * it [reads moving state](Step::reading_moving_state) and an earlier step waits: what it
    ///   found (done, refused or to do) holds for a moment only. A dry run once showed a
    ///   switchover's checkpoints done with 0 partitions while the mirror still copied: a group
    ///   ahead of the offset syncs had no translation yet.
    ///
    /// Its detail then says which step it waits for, and what it found so far.
    pub fn push(&mut self, mut step: Step) {
        let unsettled = self
            .steps
            .iter()
            .find(|s| matches!(s.state, StepState::Waiting | StepState::Refused));
        let waiting = self.waiting();
        let blocked_by = match (&step.state, unsettled, waiting) {
            (StepState::Blocked, ..) => None,
            (StepState::Todo(_), Some(s), _) => Some(s.name),
            (_, _, Some(w)) if step.reads_moving_state => Some(w.name),
            _ => None,
        };
        if let Some(earlier) = blocked_by {
            step.state = StepState::Blocked;
            step.detail = format!("after {earlier} (so far: {})", step.detail);
        }
        self.steps.push(step);
    }

    /// The first refused step.
    pub fn refused(&self) -> Option<&Step> {
        self.steps
            .iter()
            .find(|s| matches!(s.state, StepState::Refused))
    }

    /// The first waiting step.
    pub fn waiting(&self) -> Option<&Step> {
        self.steps
            .iter()
            .find(|s| matches!(s.state, StepState::Waiting))
    }

    /// True when every step is done.
    pub fn is_done(&self) -> bool {
        self.steps
            .iter()
            .all(|s| matches!(s.state, StepState::Done))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.steps {
            let state = match &s.state {
                StepState::Done => "done",
                StepState::Todo(_) => "todo",
                StepState::Waiting => "wait",
                StepState::Refused => "refused",
                StepState::Blocked => "blocked",
            };
            writeln!(f, "[{state}] {}: {}", s.name, s.detail)?;
        }
        Ok(())
    }
}

/// What the driver needs from a command: read the clusters into a plan, and carry out one
/// action.
pub trait Handover {
    /// Reads both clusters and plans.
    fn plan(&mut self) -> impl Future<Output = crate::Result<Plan>>;
    /// Carries out one action.
    fn execute(&mut self, action: &Action) -> impl Future<Output = crate::Result<()>>;
}

/// How to drive a command.
#[derive(Debug, Clone)]
pub struct DriveOptions {
    /// Print the plan and change nothing.
    pub dry_run: bool,
    /// How long a waiting step may wait.
    pub timeout: Duration,
    /// How often the clusters are read again while a step waits.
    pub poll: Duration,
}

/// How often the plan is printed again while the same step waits.
const WAIT_PRINT: Duration = Duration::from_secs(10);

/// The environment variable naming a step after whose actions the process exits with
/// [`TEST_EXIT_CODE`]: only for tests of re-running an interrupted command.
pub const TEST_EXIT_AFTER: &str = "STRAIT_HANDOVER_EXIT_AFTER";
/// The exit code of the test hook.
pub const TEST_EXIT_CODE: i32 = 75;

/// Rounds of actions one run carries out: a step blocked on an earlier step's writes (e.g. the
/// copies' offsets, known once they are on the target) gets its actions in the next round.
const MAX_ROUNDS: usize = 3;

/// Runs `command`: waits while a step waits (printing it once), refuses when a step is refused,
/// executes the actions of every step to do (again, up to [`MAX_ROUNDS`], while reading back
/// shows steps to do that were blocked on them), then checks that the clusters show every step
/// done. `out` receives each printed plan. Returns the final plan.
pub async fn drive<H: Handover>(
    command: &mut H,
    options: &DriveOptions,
    mut out: impl FnMut(&str),
) -> crate::Result<Plan> {
    let started = tokio::time::Instant::now();
    // The waiting step last printed, and when.
    let mut last_wait: Option<(&'static str, tokio::time::Instant)> = None;
    let plan = loop {
        let plan = command.plan().await?;
        if options.dry_run {
            out(&format!("plan (dry run, nothing changed):\n{plan}"));
            return Ok(plan);
        }
        if let Some(step) = plan.refused() {
            out(&plan.to_string());
            return Err(HandoverError::Refused {
                step: step.name,
                reason: step.detail.clone(),
            }
            .into());
        }
        let Some(step) = plan.waiting() else {
            break plan;
        };
        // Printed when another step waits, and every WAIT_PRINT while the same one does (its
        // detail, e.g. the lag, changes at every poll).
        let now = tokio::time::Instant::now();
        if last_wait.is_none_or(|(name, at)| name != step.name || now - at >= WAIT_PRINT) {
            out(&plan.to_string());
            last_wait = Some((step.name, now));
        }
        if started.elapsed() >= options.timeout {
            return Err(HandoverError::Timeout {
                step: step.name,
                waited: options.timeout,
                reason: step.detail.clone(),
            }
            .into());
        }
        tokio::time::sleep(options.poll).await;
    };
    if plan.is_done() {
        out(&format!("nothing to do, every step is done:\n{plan}"));
        return Ok(plan);
    }
    out(&format!("plan:\n{plan}"));
    let exit_after = std::env::var(TEST_EXIT_AFTER).ok();
    let mut plan = plan;
    let mut round = 1;
    let after = loop {
        for step in &plan.steps {
            if let StepState::Todo(actions) = &step.state {
                for action in actions {
                    command.execute(action).await?;
                }
                out(&format!("[done] {}", step.name));
            }
            if exit_after.as_deref() == Some(step.name) {
                out(&format!("exiting after {} ({TEST_EXIT_AFTER})", step.name));
                std::process::exit(TEST_EXIT_CODE);
            }
        }
        // Read back: the clusters must show every step done now. A step whose actions depend
        // on what earlier ones wrote (blocked until then) has its actions now: one more round.
        let after = command.plan().await?;
        let more = after.refused().is_none()
            && after.waiting().is_none()
            && after
                .steps
                .iter()
                .any(|s| matches!(s.state, StepState::Todo(_)));
        if !more || round >= MAX_ROUNDS {
            break after;
        }
        out(&format!("plan (continued):\n{after}"));
        plan = after;
        round += 1;
    };
    out(&format!("result:\n{after}"));
    if let Some(step) = after.steps.iter().find(|s| s.state != StepState::Done) {
        return Err(HandoverError::NotSettled {
            step: step.name,
            reason: step.detail.clone(),
        }
        .into());
    }
    Ok(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_after_a_waiting_step_are_blocked() {
        let mut plan = Plan::default();
        plan.push(Step::new("a", StepState::Done, "ok"));
        plan.push(Step::new("b", StepState::Waiting, "lag 3"));
        plan.push(Step::new("c", StepState::Todo(vec![]), "commit"));
        plan.push(Step::new("d", StepState::Done, "already"));
        assert_eq!(plan.steps[2].state, StepState::Blocked);
        assert_eq!(plan.steps[3].state, StepState::Done);
        assert_eq!(plan.waiting().map(|s| s.name), Some("b"));
        assert!(!plan.is_done());
        assert_eq!(
            plan.to_string(),
            "[done] a: ok\n[wait] b: lag 3\n[blocked] c: after b (so far: commit)\n[done] d: \
             already\n"
        );
    }

    #[test]
    fn a_step_reading_moving_state_is_blocked_whatever_it_found_while_an_earlier_step_waits() {
        let mut plan = Plan::default();
        plan.push(Step::new("lag", StepState::Waiting, "lag 3"));
        for state in [StepState::Done, StepState::Refused, StepState::Todo(vec![])] {
            plan.push(Step::new("derived", state, "0 partitions").reading_moving_state());
        }
        plan.push(Step::new("own", StepState::Done, "fixed"));
        let states: Vec<&StepState> = plan.steps.iter().map(|s| &s.state).collect();
        assert_eq!(
            states,
            [
                &StepState::Waiting,
                &StepState::Blocked,
                &StepState::Blocked,
                &StepState::Blocked,
                &StepState::Done
            ]
        );
        assert_eq!(plan.steps[1].detail, "after lag (so far: 0 partitions)");
        // A refused step moves nothing: what is read after it stands (only its actions wait).
        let mut plan = Plan::default();
        plan.push(Step::new("choice", StepState::Refused, "choose"));
        plan.push(Step::new("derived", StepState::Done, "ok").reading_moving_state());
        plan.push(Step::new("todo", StepState::Todo(vec![]), "write").reading_moving_state());
        assert_eq!(plan.steps[1].state, StepState::Done);
        assert_eq!(plan.steps[2].state, StepState::Blocked);
        // Settled: nothing is blocked.
        let mut plan = Plan::default();
        plan.push(Step::new("lag", StepState::Done, "0"));
        plan.push(Step::new("derived", StepState::Done, "ok").reading_moving_state());
        assert!(plan.is_done());
    }
}
