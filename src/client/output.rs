//! Output formats: a plain table for people, JSON or YAML (the API's own shapes) for scripts.

use serde::Serialize;

use super::error::{ClientError, Result};
use crate::service::model::{ControlPlane, Operation};

/// `-o table|json|yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Columns for people.
    #[default]
    Table,
    /// The API's JSON.
    Json,
    /// The API's JSON as YAML.
    Yaml,
}

/// `value` as JSON or YAML, or `table` for the table format.
pub fn render<T: Serialize>(format: Format, value: &T, table: impl FnOnce() -> String) -> Result<String> {
    let bad = |e: String| ClientError::Other(format!("cannot print the answer: {e}"));
    match format {
        Format::Table => Ok(table()),
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| bad(e.to_string())),
        Format::Yaml => serde_yaml::to_string(value).map_err(|e| bad(e.to_string())),
    }
}

/// Prints [`render`] to stdout.
pub fn print<T: Serialize>(format: Format, value: &T, table: impl FnOnce() -> String) -> Result<()> {
    print!("{}", render(format, value, table)?);
    Ok(())
}

/// Left-aligned columns separated by three spaces, one line per row.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| format!("{c:<w$}"))
            .collect();
        padded.join("   ").trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The table of control planes.
pub fn control_planes(items: &[ControlPlane]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|cp| {
            vec![
                cp.name.clone(),
                cp.id.to_string(),
                cp.kubernetes_version.clone(),
                cp.replicas.to_string(),
                cp.phase.clone(),
                cp.created_at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            ]
        })
        .collect();
    table(&["NAME", "ID", "VERSION", "REPLICAS", "PHASE", "CREATED"], &rows)
}

/// The table of one operation.
pub fn operation(op: &Operation) -> String {
    let stages: Vec<&str> = op.stages.iter().map(|s| s.stage.as_str()).collect();
    let row = vec![
        op.id.to_string(),
        op.kind.to_string(),
        op.state.to_string(),
        op.control_plane_id.to_string(),
        if stages.is_empty() {
            "-".into()
        } else {
            stages.join(",")
        },
        op.reason.clone().unwrap_or_else(|| "-".into()),
    ];
    let mut out = table(
        &["ID", "KIND", "STATE", "CONTROL PLANE", "STAGES", "REASON"],
        &[row],
    );
    if let Some(error) = &op.error {
        out += &format!("error: {error}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![
            vec!["prod".to_string(), "Ready".to_string()],
            vec!["a-much-longer-name".to_string(), "Provisioning".to_string()],
        ];
        assert_eq!(
            table(&["NAME", "PHASE"], &rows),
            "NAME                 PHASE\nprod                 Ready\na-much-longer-name   Provisioning\n"
        );
    }

    #[test]
    fn json_and_yaml_are_the_value_itself() {
        let value = serde_json::json!({"name": "prod", "replicas": 1});
        assert_eq!(
            render(Format::Json, &value, String::new).unwrap(),
            "{\n  \"name\": \"prod\",\n  \"replicas\": 1\n}\n"
        );
        assert_eq!(
            render(Format::Yaml, &value, String::new).unwrap(),
            "name: prod\nreplicas: 1\n"
        );
        assert_eq!(render(Format::Table, &value, || "t\n".into()).unwrap(), "t\n");
    }
}
