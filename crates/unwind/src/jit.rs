//! Frames of JIT-compiled code that no CFI describes, stepped by the layout its runtime gives them:
//! HotSpot's compiled methods and stubs have a fixed frame size (the code cache says it per blob; no
//! frame pointer needed), its interpreter links its frames through rbp and saves the caller's stack
//! pointer. Everything else goes to framehop: [`WithJit`] is framehop's unwinder with these ranges
//! looked at first. Sees only bytes handed to it, like the rest of this crate.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{Error, FrameAddress, Module, Unwinder};
use std::sync::Arc;

/// How the caller of a frame in a range of JIT code is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitFrameRule {
    /// A frame of `words` 8-byte words from the stack pointer: the return address in its top word, the
    /// caller's rbp below it, the caller's stack pointer past it (HotSpot's compiled methods and runtime
    /// stubs). Before `complete` (an address) the prologue has not built it yet.
    Fixed { words: u32, complete: u64 },
    /// HotSpot's interpreter: rbp-linked, with the caller's stack pointer saved at rbp-8 (a compiled
    /// caller's frame size counts from there, not from past the return address).
    Interpreter,
    /// rbp-linked: the caller's rbp at [rbp], the return address above it, the caller's stack past both
    /// (HotSpot's call stub and the other stubs without a frame size).
    FramePointer,
}

/// A range `[start, end)` of JIT code and how its frames are stepped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitCode {
    pub start: u64,
    pub end: u64,
    pub rule: JitFrameRule,
}

/// framehop's unwinder, with the frames of known JIT code stepped by their rule first.
#[derive(Clone, Default)]
pub(crate) struct WithJit {
    pub(crate) inner: UnwinderX86_64<crate::Bytes>,
    /// Sorted by start, not overlapping.
    code: Arc<[JitCode]>,
}

impl WithJit {
    /// Replaces the known JIT code (the runtime freed and compiled code since it was last given).
    pub(crate) fn set_code(&mut self, mut code: Vec<JitCode>) {
        code.sort_unstable_by_key(|c| c.start);
        code.dedup_by(|b, a| b.start < a.end);
        self.code = code.into();
    }

    pub(crate) fn code(&self) -> &[JitCode] {
        &self.code
    }

    /// Whether `addr` lies in HotSpot's interpreter.
    pub(crate) fn interprets(&self, addr: u64) -> bool {
        self.lookup(addr).is_some_and(|c| c.rule == JitFrameRule::Interpreter)
    }

    fn lookup(&self, addr: u64) -> Option<&JitCode> {
        let i = self.code.partition_point(|c| c.start <= addr).checked_sub(1)?;
        let c = &self.code[i];
        (addr < c.end).then_some(c)
    }

    /// The caller of a frame at `pc` in `code`: its return address, with `regs` set to its stack and
    /// frame pointers.
    fn step<F>(
        &self,
        code: &JitCode,
        pc: u64,
        first: bool,
        regs: &mut UnwindRegsX86_64,
        read: &mut F,
    ) -> Result<u64, Error>
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        let (sp, bp) = (regs.sp(), regs.bp());
        let mut rd = |a: u64| read(a).map_err(|_| Error::CouldNotReadStack(a));
        let (ret, caller_sp, caller_bp) = match code.rule {
            // Interrupted in the prologue: the return address is on top, or under the caller's rbp it
            // pushed first. Callers of compiled code are in the code cache (stubs, adapters, compiled
            // code, the interpreter): the word that lies in it is the return address.
            JitFrameRule::Fixed { complete, .. } if first && pc < complete => {
                let top = rd(sp)?;
                if self.lookup(top.wrapping_sub(1)).is_some() {
                    (top, sp + 8, bp)
                } else {
                    (rd(sp + 8)?, sp + 16, bp)
                }
            }
            JitFrameRule::Fixed { words, .. } => {
                let end = sp.checked_add(u64::from(words) * 8).ok_or(Error::IntegerOverflow)?;
                (rd(end - 8)?, end, rd(end - 16)?)
            }
            JitFrameRule::Interpreter => (rd(bp + 8)?, rd(bp.wrapping_sub(8))?, rd(bp)?),
            JitFrameRule::FramePointer => (rd(bp + 8)?, bp + 16, rd(bp)?),
        };
        if caller_sp <= sp {
            return Err(Error::DidNotAdvance);
        }
        regs.set_sp(caller_sp);
        regs.set_bp(caller_bp);
        Ok(ret)
    }
}

impl Unwinder for WithJit {
    type UnwindRegs = UnwindRegsX86_64;
    type Cache = CacheX86_64;
    type Module = Module<crate::Bytes>;

    fn add_module(&mut self, module: Self::Module) {
        self.inner.add_module(module);
    }

    fn remove_module(&mut self, module_avma_range_start: u64) {
        self.inner.remove_module(module_avma_range_start);
    }

    fn max_known_code_address(&self) -> u64 {
        self.inner.max_known_code_address().max(self.code.last().map_or(0, |c| c.end))
    }

    fn unwind_frame<F>(
        &self,
        address: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        cache: &mut CacheX86_64,
        read_stack: &mut F,
    ) -> Result<Option<u64>, Error>
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        let pc = address.address_for_lookup();
        match self.lookup(pc) {
            Some(code) => {
                let code = *code;
                self.step(&code, pc, !address.is_return_address(), regs, read_stack).map(Some)
            }
            None => self.inner.unwind_frame(address, regs, cache, read_stack),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{JitCode, JitFrameRule, WithJit};
    use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
    use framehop::{FrameAddress, Unwinder};

    /// A stack of words from `base`, read like a copied stack.
    fn reader(base: u64, words: &[u64]) -> impl FnMut(u64) -> Result<u64, ()> + '_ {
        move |a| words.get(((a - base) / 8) as usize).copied().ok_or(())
    }

    /// An interpreted frame calls compiled code (a 4-word frame), which calls compiled code interrupted
    /// in its prologue; the interpreter's caller is the call stub (rbp-linked).
    #[test]
    fn compiled_interpreted_and_stub_frames_are_stepped_by_their_layout() {
        let mut u = WithJit::default();
        u.set_code(vec![
            JitCode { start: 0x1000, end: 0x1100, rule: JitFrameRule::Fixed { words: 2, complete: 0x1010 } },
            JitCode { start: 0x2000, end: 0x2100, rule: JitFrameRule::Fixed { words: 4, complete: 0x2010 } },
            JitCode { start: 0x3000, end: 0x4000, rule: JitFrameRule::Interpreter },
            JitCode { start: 0x5000, end: 0x5100, rule: JitFrameRule::FramePointer },
        ]);
        let base = 0x7000;
        // 0x7000: return into 0x2000's code (prologue pushed nothing yet)
        // 0x7008..0x7028: 0x2000's frame: 2 words of its own, caller rbp 0x7040, return into the interpreter
        // 0x7028, 0x7030: the interpreter's, 0x7038 its sender sp slot (rbp-8) = 0x7060
        // 0x7040: interpreter frame: saved rbp 0x7070, return into the call stub; 0x7060: caller stack
        // 0x7070: call stub frame: saved rbp 0, return 0
        let words = [0x2050, 0, 0, 0x7040, 0x3400, 0, 0, 0x7060, 0x7070, 0x5020, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut read = reader(base, &words);
        let mut regs = UnwindRegsX86_64::new(0x1004, base, 0x7040);
        let mut cache = CacheX86_64::new();
        let mut at = FrameAddress::from_instruction_pointer(0x1004);
        let mut rets = Vec::new();
        for _ in 0..4 {
            let Ok(Some(ret)) = u.unwind_frame(at, &mut regs, &mut cache, &mut read) else { break };
            rets.push((ret, regs.sp(), regs.bp()));
            let Some(next) = FrameAddress::from_return_address(ret) else { break };
            at = next;
        }
        assert_eq!(rets[0], (0x2050, 0x7008, 0x7040), "prologue: the return address on top");
        assert_eq!(rets[1], (0x3400, 0x7028, 0x7040), "4 words: return and saved rbp at its top");
        assert_eq!(rets[2], (0x5020, 0x7060, 0x7070), "interpreter: sender sp from rbp-8");
        assert_eq!(rets[3], (0, 0x7080, 0), "the call stub: rbp-linked, its return address 0 ends the walk");
    }
}
