//! `--fail-on`: which findings make a doctor run fail, for CI jobs that gate on a diagnosis.

use super::{rule_ids, Diagnosis, Finding};

/// The findings that fail a run.
#[derive(Debug, Clone, PartialEq)]
pub enum FailOn {
    /// Any finding.
    Any,
    /// A finding of one of these rules.
    Rules(Vec<String>),
    /// A finding that explains at least this share (percent) of the time it is about.
    Impact(f64),
}

impl std::str::FromStr for FailOn {
    type Err = String;

    /// `any`, `RULE[,RULE...]` (rule ids, checked, with close matches suggested) or `impact>=PCT`.
    fn from_str(s: &str) -> Result<FailOn, String> {
        let s = s.trim();
        if s == "any" {
            return Ok(FailOn::Any);
        }
        if let Some(pct) = s.strip_prefix("impact>=") {
            return match pct.trim_end_matches('%').parse::<f64>() {
                Ok(p) if (0.0..=100.0).contains(&p) => Ok(FailOn::Impact(p)),
                _ => Err(format!("'{pct}' is not a percentage from 0 to 100 (impact>=PCT)")),
            };
        }
        let known = rule_ids();
        let rules: Vec<String> =
            s.split(',').map(|r| r.trim().to_string()).filter(|r| !r.is_empty()).collect();
        if rules.is_empty() {
            return Err("expected any, RULE[,RULE...] or impact>=PCT".into());
        }
        for r in &rules {
            if !known.contains(&r.as_str()) {
                let close = whyslow_model::close_matches(r, known.iter().copied(), 3);
                return Err(format!("no doctor rule is named '{r}'{}", whyslow_model::did_you_mean(&close)));
            }
        }
        Ok(FailOn::Rules(rules))
    }
}

impl FailOn {
    /// The findings of `d` that fail the run.
    pub fn matching<'a>(&self, d: &'a Diagnosis) -> Vec<&'a Finding> {
        let hit = |f: &Finding| match self {
            FailOn::Any => true,
            FailOn::Rules(ids) => ids.iter().any(|id| id == f.id),
            FailOn::Impact(pct) => f.impact_pct >= *pct,
        };
        d.findings.iter().filter(|f| hit(f)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{rule_ids, Diagnosis, FailOn, Finding};

    #[test]
    fn parses_the_three_forms_and_names_close_rules() {
        assert_eq!("any".parse::<FailOn>(), Ok(FailOn::Any));
        assert_eq!("impact>=12.5".parse::<FailOn>(), Ok(FailOn::Impact(12.5)));
        assert_eq!("impact>=5%".parse::<FailOn>(), Ok(FailOn::Impact(5.0)));
        let first = rule_ids()[0];
        assert_eq!(
            format!("{first}, {first}").parse::<FailOn>(),
            Ok(FailOn::Rules(vec![first.into(), first.into()]))
        );
        let e = "tz-stat-strom".parse::<FailOn>().unwrap_err();
        assert!(e.starts_with("no doctor rule is named 'tz-stat-strom' (did you mean: tz-stat-storm"), "{e}");
        assert!("impact>=150".parse::<FailOn>().is_err());
        assert!("".parse::<FailOn>().is_err());
    }

    #[test]
    fn matches_findings_by_rule_and_impact() {
        let finding = |id: &'static str, impact_pct: f64| Finding {
            id,
            title: String::new(),
            impact_pct,
            impact_of: "cpu",
            confidence: super::super::Confidence::High,
            evidence: Vec::new(),
            why: String::new(),
            fix: String::new(),
            verify: String::new(),
            case: "",
        };
        let d = Diagnosis {
            findings: vec![finding("small-writes", 30.0), finding("tz-stat-storm", 4.0)],
            hot_paths: Vec::new(),
            skipped: Vec::new(),
            instrumentation_pct: 0.0,
            wall: None,
            idle_threads: Vec::new(),
            cpu_contention: None,
        };
        let ids = |f: FailOn| f.matching(&d).iter().map(|f| f.id).collect::<Vec<_>>();
        assert_eq!(ids(FailOn::Any), ["small-writes", "tz-stat-storm"]);
        assert_eq!(ids(FailOn::Impact(10.0)), ["small-writes"]);
        assert_eq!(ids(FailOn::Rules(vec!["tz-stat-storm".into()])), ["tz-stat-storm"]);
        assert!(FailOn::Impact(50.0).matching(&d).is_empty());
    }
}
