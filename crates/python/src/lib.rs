//! CPython's own structures, for Python frames in samples: where each version (3.8-3.13) keeps its
//! thread states and frame chain ([`Layout`], a table generated from each version's headers by
//! `offsets/gen.sh`), which mapped file holds an interpreter and where its `_PyRuntime` and
//! `_PyEval_EvalFrameDefault` are ([`Interpreter`]), and the code objects a frame chain points at, read
//! from the process's memory with their line tables ([`Code`]).
//!
//! The frame chain itself is walked in the kernel when a sample is taken (bpf/clock.bpf.c), with the
//! offsets of [`Layout`]; this crate tells user space what to put in its map and what the code objects
//! it sends say.
//!
//! Must never: trust a length or pointer read from the target (every read is bounded and may fail), or
//! name a frame of a version it has no layout for.

mod code;
mod elf;
mod layout;

pub use code::{read_code, Code, CodeError, Memory};
pub use elf::{looks_like_python, Interpreter};
pub use layout::{layout, Layout, FRAME_OWNED_BY_CSTACK, LAYOUTS};
