//! The call tree as nested JSON (`{name, kind, value, self, children}`), what the web UI draws its flame
//! graph from. Children are merged by function (frame) and sorted by name, like a flame graph's.

use crate::{sample_type, RenderError, NO_STACK};
use std::collections::HashMap;
use std::io::Write;
use whyslow_model::{FrameKind, Profile, NONE};

/// A node of the call tree; node 0 is the root ("all").
#[derive(Debug, Clone, PartialEq)]
pub struct TreeNode {
    /// The frame, or [`NONE`] for the root and for samples without a stack.
    pub frame: u32,
    pub value: i64,
    pub self_value: i64,
    pub children: Vec<usize>,
}

/// The call tree of one sample type (only samples with a positive value), as an arena with the root at 0.
pub fn build(p: &Profile, value: usize) -> Result<Vec<TreeNode>, RenderError> {
    sample_type(p, value)?;
    let mut nodes = vec![TreeNode { frame: NONE, value: 0, self_value: 0, children: Vec::new() }];
    let mut index: HashMap<(usize, u32), usize> = HashMap::new();
    // Tree node of each stack trie node, filled as stacks are met.
    let mut memo = vec![usize::MAX; p.stacks.len()];
    let mut no_stack = None;
    for s in p.samples.iter().filter(|s| s.values[value] > 0) {
        let n = s.values[value];
        let leaf = if s.stack == NONE {
            *no_stack.get_or_insert_with(|| child(&mut nodes, &mut index, 0, NONE))
        } else {
            let mut chain = Vec::new();
            let mut at = s.stack;
            while at != NONE && memo[at as usize] == usize::MAX {
                chain.push(at);
                at = p.stacks[at as usize].parent;
            }
            let mut node = if at == NONE { 0 } else { memo[at as usize] };
            for &st in chain.iter().rev() {
                node = child(&mut nodes, &mut index, node, p.stacks[st as usize].frame);
                memo[st as usize] = node;
            }
            node
        };
        nodes[leaf].self_value += n;
    }
    // Values are summed bottom-up: children always have larger indices than their parent.
    for i in (0..nodes.len()).rev() {
        let kids: i64 = nodes[i].children.iter().map(|&c| nodes[c].value).sum();
        nodes[i].value = nodes[i].self_value + kids;
    }
    Ok(nodes)
}

fn child(
    nodes: &mut Vec<TreeNode>,
    index: &mut HashMap<(usize, u32), usize>,
    parent: usize,
    frame: u32,
) -> usize {
    *index.entry((parent, frame)).or_insert_with(|| {
        nodes.push(TreeNode { frame, value: 0, self_value: 0, children: Vec::new() });
        let id = nodes.len() - 1;
        nodes[parent].children.push(id);
        id
    })
}

pub(crate) fn kind(p: &Profile, frame: u32) -> &'static str {
    if frame == NONE {
        return "none";
    }
    match p.frames[frame as usize].kind {
        FrameKind::User => "user",
        FrameKind::Inlined => "inlined",
        FrameKind::Kernel => "kernel",
        FrameKind::Unknown => "unknown",
    }
}

/// Writes `{"sample_type", "unit", "sample_types": [{name, unit}], "total", "tree": {name, kind, value, self, children: [...]}}`;
/// [`RenderError::Empty`] when no sample has a positive value.
pub fn json(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let st = sample_type(p, value)?;
    let nodes = build(p, value)?;
    if nodes[0].value == 0 {
        return Err(RenderError::Empty(st.name.clone()));
    }
    let mut out = Vec::with_capacity(64 * nodes.len());
    write!(
        out,
        "{{\"sample_type\":{},\"unit\":{},\"sample_types\":{},\"total\":{},\"tree\":",
        serde_json::Value::from(st.name.as_str()),
        serde_json::Value::from(st.unit.as_str()),
        serde_json::json!(p
            .sample_types
            .iter()
            .map(|t| serde_json::json!({"name": t.name, "unit": t.unit}))
            .collect::<Vec<_>>()),
        nodes[0].value
    )?;
    let children: Vec<Vec<usize>> = nodes.iter().map(|n| n.children.clone()).collect();
    let name = |i: usize| if i == 0 { "all".to_string() } else { frame_label(p, nodes[i].frame) };
    nested(&mut out, &children, name, |out, i, label| {
        let n = &nodes[i];
        write!(
            out,
            "\"name\":{},\"kind\":{},\"value\":{},\"self\":{}",
            serde_json::Value::from(label),
            serde_json::Value::from(if i == 0 { "root" } else { kind(p, n.frame) }),
            n.value,
            n.self_value
        )
    })?;
    out.extend_from_slice(b"}\n");
    w.write_all(&out)?;
    Ok(())
}

/// A frame's name, or [`NO_STACK`] for the node of samples without a stack.
pub(crate) fn frame_label(p: &Profile, frame: u32) -> String {
    if frame == NONE {
        NO_STACK.to_string()
    } else {
        p.frame_name(frame).to_string()
    }
}

/// Writes the tree rooted at node 0 as nested JSON objects: `head` writes a node's own fields (given its
/// name), then come its `children`, sorted by name. Iterative: stacks can be thousands of frames deep.
pub(crate) fn nested(
    out: &mut Vec<u8>,
    children: &[Vec<usize>],
    name: impl Fn(usize) -> String,
    mut head: impl FnMut(&mut Vec<u8>, usize, String) -> std::io::Result<()>,
) -> std::io::Result<()> {
    // Writes a node up to its children's list; its children, sorted, to write next.
    let mut open = |out: &mut Vec<u8>, i: usize| -> std::io::Result<(Vec<usize>, usize)> {
        out.push(b'{');
        head(out, i, name(i))?;
        out.extend_from_slice(b",\"children\":[");
        let mut kids = children[i].clone();
        kids.sort_by_cached_key(|&c| name(c));
        Ok((kids, 0))
    };
    let mut todo = vec![open(out, 0)?];
    while let Some((kids, next)) = todo.last_mut() {
        if *next < kids.len() {
            if *next > 0 {
                out.push(b',');
            }
            let c = kids[*next];
            *next += 1;
            let node = open(out, c)?;
            todo.push(node);
        } else {
            out.extend_from_slice(b"]}");
            todo.pop();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{self, render};

    #[test]
    fn tree_nests_callers_and_sums_values() {
        let out = render(|w| json(w, &fixture::profile(), 0));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["total"], 100);
        assert_eq!(v["sample_type"], "cpu");
        assert_eq!(v["sample_types"][1]["name"], "cpu-ns");
        let root = &v["tree"];
        assert_eq!((root["name"].as_str(), root["value"].as_i64()), (Some("all"), Some(100)));
        let main = &root["children"][0];
        assert_eq!(
            (main["name"].as_str(), main["value"].as_i64(), main["self"].as_i64()),
            (Some("main"), Some(100), Some(0))
        );
        let run = &main["children"][0];
        let kids: Vec<(&str, i64, i64)> = run["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["value"].as_i64().unwrap(), c["self"].as_i64().unwrap()))
            .collect();
        assert_eq!(kids, vec![("burn_a", 60, 40), ("burn_b", 30, 30), ("burn_c", 10, 0)]);
        assert_eq!(run["children"][0]["children"][0]["kind"], "inlined");
        assert_eq!(run["children"][2]["children"][0]["kind"], "kernel");
    }
}
