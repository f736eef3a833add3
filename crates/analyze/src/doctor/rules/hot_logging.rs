//! hot-logging (seeds 000, 003, 004): formatting and writing log lines on the request path.

use super::{cpu_share_rule, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::LOGGING_CPU_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "hot-logging",
    title: "logging and message formatting take a large share of CPU",
    why: "every log line pays for printf-style formatting, a timestamp (localtime/strftime) and usually a \
          write; on a request path that runs thousands of times a second this adds up to real CPU time",
    fix: "log less on the hot path (raise the level, sample, or move debug logs behind a cheap level check \
          before formatting), cache the formatted timestamp per second, and buffer log output",
    shrinks: "the formatting functions (vfprintf, strftime, the logger)",
};

fn is_logging(f: &Func) -> bool {
    if f.kernel {
        return false;
    }
    const FORMAT: [&str; 18] = [
        "printf",
        "fprintf",
        "sprintf",
        "snprintf",
        "vprintf",
        "vfprintf",
        "vsprintf",
        "vsnprintf",
        "dprintf",
        "vdprintf",
        "asprintf",
        "vasprintf",
        "syslog",
        "vsyslog",
        "strftime",
        "strftime_l",
        "fputs",
        "puts",
    ];
    const PREFIXES: [&str; 12] = [
        "vfprintf",
        "vsnprintf",
        "printf_",
        "fmt::",
        "spdlog::",
        "google::LogMessage",
        "log4cxx::",
        "fmt.",
        "log.",
        "go.uber.org/zap",
        "github.com/sirupsen/logrus",
        "std::basic_ostream",
    ];
    let user_logger = {
        let n = f.name.to_ascii_lowercase();
        n == "log"
            || n.starts_with("log_")
            || n.contains("logger")
            || n.contains("::log")
            || n.ends_with("_log")
    };
    named(f.plain(), &FORMAT, &PREFIXES) || (f.is_user_code() && user_logger)
}

pub fn check(f: &Facts) -> Verdict {
    cpu_share_rule(f, &TEXT, LOGGING_CPU_PCT, &is_logging)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn counts_formatting_under_the_logger_once() {
        let p = profile(&[
            ("main;handle;log_request;lib:vsnprintf;lib:__printf_buffer", 20, 0),
            ("main;handle;log_request;lib:write", 5, 0),
            ("main;handle;lib:snprintf", 5, 0),
            ("main;handle;parse", 70, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(30.0));
        let quiet = profile(&[("main;handle;lib:snprintf", 5, 0), ("main;handle;parse", 95, 0)]);
        assert_eq!(fired(super::check, &quiet), None);
    }
}
