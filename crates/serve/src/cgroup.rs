//! Labels of a process from its cgroup v2 path, the way fleets are organised: the systemd unit, the
//! container id (docker, containerd, cri-o, podman, with the systemd or the cgroupfs driver), and the
//! Kubernetes pod uid. Only what the path carries: a Kubernetes container's *name* is not in it (it is the
//! kubelet's, through the CRI), so it is not guessed. Pure string work, no /proc access.

use std::collections::BTreeMap;

/// The label names, as queried (`selector=unit=nginx.service`) and pushed.
pub const UNIT: &str = "unit";
pub const CONTAINER_ID: &str = "container_id";
pub const POD_UID: &str = "pod_uid";
pub const LABELS: [&str; 3] = [UNIT, CONTAINER_ID, POD_UID];

/// A container id: 64 lowercase hex digits.
fn container_id(s: &str) -> Option<&str> {
    (s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(s)
}

/// The container id a path component names: `docker-ID.scope`, `cri-containerd-ID.scope`,
/// `crio-ID.scope`, `libpod-ID.scope` (systemd driver), or a bare `ID` (cgroupfs driver).
fn component_container(c: &str) -> Option<&str> {
    let inner = c.strip_suffix(".scope").unwrap_or(c);
    for prefix in ["docker-", "cri-containerd-", "crio-", "libpod-", ""] {
        if let Some(id) = inner.strip_prefix(prefix).and_then(container_id) {
            return Some(id);
        }
    }
    None
}

/// A pod uid from `podUID` (cgroupfs: dashes) or `kubepods-QOS-podUID.slice` (systemd: underscores).
fn component_pod(c: &str) -> Option<String> {
    let c = c.strip_suffix(".slice").unwrap_or(c);
    let at = c.rfind("pod")?;
    let uid = c[at + 3..].replace('_', "-");
    let ok = uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| {
            if [8, 13, 18, 23].contains(&i) {
                b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        });
    ok.then_some(uid)
}

/// The labels a cgroup path carries (empty for the root or an unknown layout).
pub fn labels(path: &str) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    for c in &parts {
        if let Some(uid) = component_pod(c) {
            out.insert(POD_UID, uid);
        }
    }
    // The innermost container id (a container in a container names its own).
    if let Some(id) = parts.iter().rev().find_map(|c| component_container(c)) {
        out.insert(CONTAINER_ID, id.to_string());
    }
    // The innermost systemd unit that is not a container's scope: a service, a socket, a session or
    // other scope (a container started by a unit keeps the unit's name).
    let unit = parts.iter().rev().find(|c| {
        (c.ends_with(".service") || c.ends_with(".scope") || c.ends_with(".socket") || c.ends_with(".mount"))
            && component_container(c).is_none()
    });
    if let Some(u) = unit {
        out.insert(UNIT, u.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{labels, CONTAINER_ID, POD_UID, UNIT};

    const ID: &str = "4f1c2b3a5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708";

    fn l(path: &str) -> Vec<(&'static str, String)> {
        labels(path).into_iter().collect()
    }

    #[test]
    fn systemd_units_and_sessions() {
        assert_eq!(l("/system.slice/nginx.service"), [(UNIT, "nginx.service".into())]);
        assert_eq!(l("/user.slice/user-0.slice/session-3.scope"), [(UNIT, "session-3.scope".into())]);
        // A unit's sub-cgroup (delegation) still names the unit.
        assert_eq!(l("/system.slice/redis.service/worker"), [(UNIT, "redis.service".into())]);
        assert!(l("/").is_empty() && l("").is_empty() && l("/init.scope/x/y").len() == 1);
    }

    #[test]
    fn container_ids_of_every_runtime_and_driver() {
        for path in [
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
            format!("/system.slice/crio-{ID}.scope"),
            format!("/machine.slice/libpod-{ID}.scope"),
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"),
            format!("/system.slice/containerd.service/k8s.io/{ID}"),
        ] {
            assert_eq!(labels(&path).get(CONTAINER_ID).map(String::as_str), Some(ID), "{path}");
        }
        // A container's scope is not its unit; the unit that started it is.
        assert_eq!(labels(&format!("/system.slice/docker-{ID}.scope")).get(UNIT), None);
        assert_eq!(
            labels(&format!("/system.slice/containerd.service/k8s.io/{ID}")).get(UNIT).map(String::as_str),
            Some("containerd.service")
        );
        // Not 64 hex digits: no id.
        assert!(!labels("/docker/abc").contains_key(CONTAINER_ID));
    }

    #[test]
    fn kubernetes_pods_with_the_systemd_and_cgroupfs_drivers() {
        let uid = "0f9e8d7c-6b5a-4321-8fed-cba987654321";
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
            uid.replace('-', "_")
        );
        let cgroupfs = format!("/kubepods/besteffort/pod{uid}/{ID}");
        let guaranteed =
            format!("/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope", uid.replace('-', "_"));
        for path in [systemd, cgroupfs, guaranteed] {
            let got = labels(&path);
            assert_eq!(got.get(POD_UID).map(String::as_str), Some(uid), "{path}");
            assert_eq!(got.get(CONTAINER_ID).map(String::as_str), Some(ID), "{path}");
            assert_eq!(got.get(UNIT), None, "{path}");
        }
    }
}
