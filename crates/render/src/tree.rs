//! The call tree as compact JSON (a table of frame names and the nodes in preorder as flat numbers), what
//! the web UI draws its flame graph from, and the nested JSON writer of the diff tree. Children are merged
//! by function (frame) and sorted by name, like a flame graph's.

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

/// Writes `{"sample_type", "unit", "sample_types": [{name, unit}], "total", "names", "kinds", "nodes"}`:
/// `names[i]` and `kinds[i]` are a frame's name and kind (`root`, `user`, `inlined`, `kernel`,
/// `unknown`, `none`), `nodes` the call tree in preorder as four numbers per node: name index, value,
/// self, number of children (children sorted by name). The root is `all`. A flat array of numbers keeps
/// a tree of hundreds of thousands of nodes a few MB that a browser parses fast.
/// [`RenderError::Empty`] when no sample has a positive value.
pub fn json(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let st = sample_type(p, value)?;
    let mut nodes = build(p, value)?;
    if nodes[0].value == 0 {
        return Err(RenderError::Empty(st.name.clone()));
    }
    // Names by (name, kind): frames of one function in several modules share an entry.
    let mut names: Vec<(&str, &str)> = vec![("all", "root")];
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    let mut name_of = vec![0usize; nodes.len()];
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let key = (frame_label(p, n.frame), kind(p, n.frame));
        name_of[i] = *index.entry(key).or_insert_with(|| {
            names.push(key);
            names.len() - 1
        });
    }
    let mut out = Vec::with_capacity(24 * nodes.len());
    write!(
        out,
        "{{\"sample_type\":{},\"unit\":{},\"sample_types\":{},\"total\":{},\"names\":{},\"kinds\":{},\"nodes\":[",
        serde_json::Value::from(st.name.as_str()),
        serde_json::Value::from(st.unit.as_str()),
        serde_json::json!(p
            .sample_types
            .iter()
            .map(|t| serde_json::json!({"name": t.name, "unit": t.unit}))
            .collect::<Vec<_>>()),
        nodes[0].value,
        serde_json::json!(names.iter().map(|n| n.0).collect::<Vec<_>>()),
        serde_json::json!(names.iter().map(|n| n.1).collect::<Vec<_>>()),
    )?;
    let mut todo = vec![0usize];
    while let Some(i) = todo.pop() {
        let mut kids = std::mem::take(&mut nodes[i].children);
        kids.sort_by_key(|&c| names[name_of[c]].0);
        let n = &nodes[i];
        let sep = if i == 0 { "" } else { "," };
        write!(out, "{sep}{},{},{},{}", name_of[i], n.value, n.self_value, kids.len())?;
        todo.extend(kids.iter().rev());
    }
    out.extend_from_slice(b"]}\n");
    w.write_all(&out)?;
    Ok(())
}

/// A frame's name, or [`NO_STACK`] for the node of samples without a stack.
pub(crate) fn frame_label(p: &Profile, frame: u32) -> &str {
    if frame == NONE {
        NO_STACK
    } else {
        p.frame_name(frame)
    }
}

/// Writes the tree rooted at node 0 as nested JSON objects: `{"name": name(i)`, what `head` writes of the
/// node's other fields (each after a comma), then its `children`, sorted by name. Iterative: stacks can
/// be thousands of frames deep.
pub(crate) fn nested<'a>(
    out: &mut Vec<u8>,
    mut children: Vec<Vec<usize>>,
    name: impl Fn(usize) -> &'a str,
    mut head: impl FnMut(&mut Vec<u8>, usize) -> std::io::Result<()>,
) -> std::io::Result<()> {
    // Writes a node up to its children's list; its children, sorted, to write next.
    let mut open = |out: &mut Vec<u8>, i: usize| -> std::io::Result<(Vec<usize>, usize)> {
        out.extend_from_slice(b"{\"name\":");
        serde_json::to_writer(&mut *out, name(i))?;
        head(out, i)?;
        out.extend_from_slice(b",\"children\":[");
        let mut kids = std::mem::take(&mut children[i]);
        kids.sort_by_key(|&c| name(c));
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
    use super::json;
    use crate::fixture::{self, render};

    #[test]
    fn tree_nests_callers_and_sums_values() {
        let out = render(|w| json(w, &fixture::profile(), 0));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["total"], 100);
        assert_eq!(v["sample_type"], "cpu");
        assert_eq!(v["sample_types"][1]["name"], "cpu-ns");
        // Rebuilt from the flat preorder: (name, kind, value, self, children).
        let names: Vec<&str> = v["names"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        let kinds: Vec<&str> = v["kinds"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        let flat: Vec<i64> = v["nodes"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        #[derive(Debug)]
        struct N<'a>(&'a str, &'a str, i64, i64, Vec<N<'a>>);
        fn read<'a>(flat: &mut &[i64], names: &[&'a str], kinds: &[&'a str]) -> N<'a> {
            let (name, value, self_, kids) = (flat[0] as usize, flat[1], flat[2], flat[3]);
            *flat = &flat[4..];
            let children = (0..kids).map(|_| read(flat, names, kinds)).collect();
            N(names[name], kinds[name], value, self_, children)
        }
        let mut rest = &flat[..];
        let root = read(&mut rest, &names, &kinds);
        assert!(rest.is_empty());
        assert_eq!((root.0, root.1, root.2), ("all", "root", 100));
        let main = &root.4[0];
        assert_eq!((main.0, main.2, main.3), ("main", 100, 0));
        let run = &main.4[0];
        let kids: Vec<(&str, i64, i64)> = run.4.iter().map(|c| (c.0, c.2, c.3)).collect();
        assert_eq!(kids, vec![("burn_a", 60, 40), ("burn_b", 30, 30), ("burn_c", 10, 0)]);
        assert_eq!(run.4[0].4[0].1, "inlined");
        assert_eq!(run.4[2].4[0].1, "kernel");
    }
}
