//! Progress of an operation on stderr: a spinner with a line per stage on a terminal, else one plain line
//! per stage (for scripts and logs).

use std::{io::IsTerminal as _, time::Duration};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::service::model::{Operation, StageReached};

/// The display of one operation's stages.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    shown: usize,
    label: String,
}

/// The line of a stage reached: `stage <name> at <RFC 3339 time>`.
pub fn stage_line(stage: &StageReached) -> String {
    format!(
        "stage {} at {}",
        stage.stage,
        stage.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

impl Progress {
    /// Starts the display for `label` (e.g. `create prod`): a spinner when stdout and stderr are terminals.
    pub fn start(label: &str) -> Progress {
        let tty = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let bar = tty.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
                bar.set_style(style);
            }
            bar.set_message(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress {
            bar,
            shown: 0,
            label: label.to_string(),
        }
    }

    /// Shows the stages of `op` not shown yet, and its state.
    pub fn update(&mut self, op: &Operation) {
        for stage in op.stages.iter().skip(self.shown) {
            let line = stage_line(stage);
            match &self.bar {
                Some(bar) => bar.println(format!("  ✓ {line}")),
                None => eprintln!("{line}"),
            }
        }
        self.shown = self.shown.max(op.stages.len());
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{}: {}", self.label, op.state));
        }
    }

    /// Removes the spinner (the stage lines stay).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::OperationStage;

    #[test]
    fn a_stage_line_names_the_stage_and_its_time() {
        let stage = StageReached {
            stage: OperationStage::DatastoreReady,
            at: "2026-12-02T04:40:01.5Z".parse().unwrap(),
        };
        assert_eq!(
            stage_line(&stage),
            "stage datastoreReady at 2026-12-02T04:40:01.500Z"
        );
    }
}
