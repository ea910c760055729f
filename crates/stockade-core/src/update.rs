//! Updates of a sandbox's settings: which fields may change after
//! create, their validation (the same checks as create), and when each change
//! takes effect.

use std::collections::BTreeMap;

use crate::error::ValidationErrors;
use crate::spec::{
    parse_cpu, parse_env, parse_memory, parse_tags, parse_timeout_minutes, Defaults, Labels,
    SandboxName, SandboxSpec,
};

/// Raw update input, every field optional; a given field replaces the
/// current value as a whole (labels, tags and environment are not merged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecPatch {
    pub name: Option<String>,
    pub timeout_minutes: Option<f64>,
    pub labels: Option<Vec<String>>,
    pub tags: Option<BTreeMap<String, String>>,
    pub environment_vars: Option<BTreeMap<String, String>>,
    pub cpu_cores: Option<f64>,
    pub memory_gb: Option<f64>,
    /// `networkPolicy` as sent.
    pub network_policy: Option<serde_json::Value>,
}

/// One field an update can set, by its API name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PatchField {
    Name,
    TimeoutMinutes,
    Labels,
    Tags,
    EnvironmentVars,
    CpuCores,
    MemoryGb,
    NetworkPolicy,
}

impl PatchField {
    /// The field's name in the API (camelCase).
    pub fn api_name(self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::TimeoutMinutes => "timeoutMinutes",
            Self::Labels => "labels",
            Self::Tags => "tags",
            Self::EnvironmentVars => "environmentVars",
            Self::CpuCores => "cpuCores",
            Self::MemoryGb => "memoryGB",
            Self::NetworkPolicy => "networkPolicy",
        }
    }
}

impl SpecPatch {
    /// The fields this patch sets, in a stable order.
    pub fn fields(&self) -> Vec<PatchField> {
        let mut out = Vec::new();
        let mut add = |given: bool, f: PatchField| {
            if given {
                out.push(f);
            }
        };
        add(self.name.is_some(), PatchField::Name);
        add(self.timeout_minutes.is_some(), PatchField::TimeoutMinutes);
        add(self.labels.is_some(), PatchField::Labels);
        add(self.tags.is_some(), PatchField::Tags);
        add(self.environment_vars.is_some(), PatchField::EnvironmentVars);
        add(self.cpu_cores.is_some(), PatchField::CpuCores);
        add(self.memory_gb.is_some(), PatchField::MemoryGb);
        add(self.network_policy.is_some(), PatchField::NetworkPolicy);
        out
    }

    pub fn is_empty(&self) -> bool {
        self.fields().is_empty()
    }

    /// Checks every given field as create does and returns `spec` with them
    /// applied. Every bad field is reported by its API name.
    pub fn apply(
        &self,
        spec: &SandboxSpec,
        defaults: &Defaults,
    ) -> Result<SandboxSpec, ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let mut out = spec.clone();
        if let Some(n) = &self.name {
            if let Some(n) = errs.check(SandboxName::parse(n)) {
                out.name = n;
            }
        }
        if let Some(t) = self.timeout_minutes {
            if let Some(t) = errs.check(parse_timeout_minutes(t, "timeoutMinutes")) {
                out.timeout_minutes = t;
            }
        }
        if let Some(l) = &self.labels {
            if let Some(l) = errs.check(Labels::parse_field(l, "labels")) {
                out.labels = l;
            }
        }
        if let Some(t) = &self.tags {
            if let Some(t) = errs.check(parse_tags(t, "tags")) {
                out.tags = t;
            }
        }
        if let Some(e) = &self.environment_vars {
            if let Some(e) = errs.check(parse_env(e, "environmentVars")) {
                // Variables dropped now (or earlier, and not given again)
                // stay in the container's environment: execs unset them.
                let mut removed: Vec<String> = out
                    .environment_vars
                    .keys()
                    .chain(out.removed_env.iter())
                    .filter(|k| !e.contains_key(*k))
                    .cloned()
                    .collect();
                removed.sort();
                removed.dedup();
                out.removed_env = removed;
                out.environment_vars = e;
            }
        }
        if let Some(c) = self.cpu_cores {
            if let Some(c) = errs.check(parse_cpu(c, defaults, "cpuCores")) {
                out.cpu_cores = c;
            }
        }
        if let Some(m) = self.memory_gb {
            if let Some(m) = errs.check(parse_memory(m, defaults, "memoryGB")) {
                out.memory_gb = m;
            }
        }
        if let Some(p) = &self.network_policy {
            if let Some(p) = crate::spec::network_of(None, Some(p), &mut errs) {
                out.network = p;
            }
        }
        errs.into_result()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SandboxId;
    use crate::spec::SpecInput;

    fn spec() -> SandboxSpec {
        SandboxSpec::from_input(
            SpecInput {
                name: Some("demo".into()),
                labels: Some(vec!["a".into()]),
                environment_vars: Some([("A".to_string(), "1".to_string())].into()),
                ..Default::default()
            },
            &SandboxId::parse("abcdefghijkl").unwrap(),
            &Defaults::default(),
        )
        .unwrap()
    }

    #[test]
    fn given_fields_replace_the_current_values() {
        let patch = SpecPatch {
            name: Some("renamed".into()),
            timeout_minutes: Some(0.5),
            labels: Some(vec!["b".into(), "c".into()]),
            tags: Some([("k".to_string(), "v".to_string())].into()),
            environment_vars: Some([("B".to_string(), "2".to_string())].into()),
            cpu_cores: Some(2.0),
            memory_gb: Some(0.5),
            network_policy: Some(serde_json::json!({ "allow": ["pypi.org"] })),
        };
        let out = patch.apply(&spec(), &Defaults::default()).unwrap();
        assert!(out.network.allows_domain("pypi.org", 443));
        assert!(!out.network.allows_domain("evil.test", 443));
        assert_eq!(out.name.as_str(), "renamed");
        assert_eq!(out.timeout_minutes, 0.5);
        assert_eq!(out.labels.to_strings(), vec!["b", "c"]);
        assert_eq!(out.tags.get("k").map(String::as_str), Some("v"));
        assert_eq!(out.environment_vars.len(), 1, "replaced, not merged");
        assert_eq!(
            out.removed_env,
            vec!["A".to_string()],
            "A is unset for execs"
        );
        assert_eq!(out.environment_vars.get("B").map(String::as_str), Some("2"));
        assert_eq!(out.cpu_cores, 2.0);
        assert_eq!(out.memory_gb, 0.5);
        assert_eq!(patch.fields().len(), 8);
    }

    #[test]
    fn absent_fields_stay() {
        let patch = SpecPatch {
            tags: Some(BTreeMap::new()),
            ..Default::default()
        };
        let before = spec();
        let out = patch.apply(&before, &Defaults::default()).unwrap();
        assert_eq!(out.name, before.name);
        assert_eq!(out.labels, before.labels);
        assert_eq!(out.environment_vars, before.environment_vars);
        assert_eq!(patch.fields(), vec![PatchField::Tags]);
        assert!(SpecPatch::default().is_empty());
    }

    #[test]
    fn every_bad_field_is_named() {
        let patch = SpecPatch {
            name: Some("-bad".into()),
            timeout_minutes: Some(-1.0),
            labels: Some(vec!["bad label".into()]),
            tags: Some((0..6).map(|i| (format!("k{i}"), "v".into())).collect()),
            environment_vars: Some([("1X".to_string(), "v".to_string())].into()),
            cpu_cores: Some(0.0),
            memory_gb: Some(f64::NAN),
            network_policy: Some(serde_json::json!({ "allow": ["not a domain!"] })),
        };
        let errs = patch.apply(&spec(), &Defaults::default()).unwrap_err();
        let fields: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "name",
                "timeoutMinutes",
                "labels[0]",
                "tags",
                "environmentVars.1X",
                "cpuCores",
                "memoryGB",
                "networkPolicy.allow[0]"
            ]
        );
    }
}
