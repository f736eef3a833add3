//! Where a uprobe may sit in a function without changing what the function computes.
//!
//! The kernel's uprobe code either emulates the probed instruction (push, nop, direct jmp/jcc/call: about
//! half a microsecond per hit here) or copies it out of line and single-steps it (about ten times that).
//! Its instruction analysis ignores VEX/EVEX/XOP prefixes: it reads the opcode byte after the prefix as a
//! legacy opcode, so a `vpbroadcastb` (byte 7a) is "emulated" as a `jp` and never runs. Every probe site is
//! therefore decoded first (iced-x86) and only legacy-encoded instructions are probed.
//!
//! A probe may move from the entry to a later instruction when that is provably the same count: the site
//! lies in the entry's straight-line prefix (no branch before it, so it runs once per call) and neither it
//! nor any instruction between the entry and it is the target of a branch, a taken address (`lea`) or a
//! symbol anywhere in the file (so no other path reaches it). One exception keeps counts exact: where the
//! only other ways in are unconditional direct jumps from other functions (glibc's mempcpy jumps into
//! memmove's first instructions), a probe that only counts may still move, and each of those jumps gets a
//! probe that subtracts one (every hit of such a jump is followed by exactly one extra hit of the site).
//! A function that jumps back to its own entry re-runs that prefix: Go's stack check does (its slow path
//! calls runtime.morestack, also taken when the scheduler preempts, and jumps to the entry). There the
//! probe goes past the check's branch, which the second run also passes, or else the jump back subtracts.
//! A function with indirect jumps or bytes that do not decode is not provable: its entry is probed when
//! safe, otherwise it is not probed at all.
//! This module reads bytes only; it never touches a process.

use iced_x86::{Code as Op, Decoder, DecoderOptions, EncodingKind, FlowControl, Formatter, GasFormatter};
use iced_x86::{InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};

/// Instructions and bytes of the entry's straight-line prefix looked at for a better site.
const MAX_PREFIX_INSNS: usize = 24;
const MAX_PREFIX_BYTES: usize = 96;

/// What a probe site must preserve for the program that runs there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Where the return address must be at the site.
    pub stack: StackNeed,
    /// Argument registers the probe reads: none of them may be written before the site.
    pub args: Args,
    /// The probe takes something at every call (its stack): every hit must be a call of this function,
    /// so no hits may be made up for by subtracting others.
    pub per_call: bool,
    /// Keep the probe at the entry whenever the entry is safe (benchmarks compare entry and moved probes).
    pub at_entry: bool,
}

impl Needs {
    /// Whether hits of the site may be corrected by subtracting hits of jumps into the prefix.
    fn compensable(&self) -> bool {
        self.stack == StackNeed::Any && self.args == Args::NONE && !self.per_call && !self.at_entry
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StackNeed {
    /// Counting only: the stack does not matter.
    #[default]
    Any,
    /// The probe reads the return address: its distance from the stack pointer must be known.
    Known,
    /// A return probe hijacks the return address at the stack pointer: nothing may be pushed before the site.
    Untouched,
}

/// A set of argument registers (the SysV integer arguments and Go's first argument register).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Args(u8);

impl Args {
    pub const NONE: Args = Args(0);
    pub const RDI: Args = Args(1);
    pub const RSI: Args = Args(2);
    pub const RDX: Args = Args(4);
    pub const RAX: Args = Args(8);

    pub const fn with(self, other: Args) -> Args {
        Args(self.0 | other.0)
    }

    /// The argument register `r` is (none for other registers).
    fn of(r: Register) -> Args {
        match r {
            Register::RDI => Args::RDI,
            Register::RSI => Args::RSI,
            Register::RDX => Args::RDX,
            Register::RAX => Args::RAX,
            _ => Args::NONE,
        }
    }
}

/// How the kernel runs a probed instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// Emulated in the kernel (push, nop, direct jmp/jcc/call): the cheap kind.
    Emulated,
    /// Copied out of line and single-stepped: correct for legacy instructions, about ten times dearer.
    SingleStepped,
}

/// A safe probe site of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// Virtual address of the probed instruction.
    pub address: u64,
    /// Bytes from the entry to the site (0: the entry itself).
    pub moved: u64,
    pub execution: Execution,
    /// The instruction, as `objdump` would print it (`jb 0x16e080`).
    pub instruction: String,
    /// Bytes pushed between the entry and the site: the return address is at `sp + stack_delta`.
    pub stack_delta: u32,
    /// File offsets of jumps from elsewhere into the instructions before the site: each of their hits
    /// is one hit of the site that is not a call, to subtract.
    pub compensate: Vec<u64>,
}

/// Where to probe a function, or why it cannot be probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    Site(Site),
    Unsafe(String),
}

/// An executable section: where it is loaded, where it is in the file, its bytes.
pub struct Section {
    pub address: u64,
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// The executable code of one ELF file, with every address other code may enter it at.
pub struct Code {
    sections: Vec<Section>,
    /// Sorted: symbol addresses, conditional branch and call targets, `lea`-taken code addresses.
    entries: Vec<u64>,
    /// Sorted (target, source) of every unconditional direct jump.
    jumps: Vec<(u64, u64)>,
}

impl Code {
    /// Reads the executable sections of `path` and finds every address code can be entered at. `symbols`
    /// are the function addresses of the file (from its symbol tables); decoding restarts at each of
    /// them so data between functions cannot hide a branch.
    pub fn read(path: &std::path::Path, symbols: &[u64]) -> Result<Code, crate::SymbolError> {
        use object::{Object, ObjectSection, SectionKind};
        let shown = path.display().to_string();
        let data = crate::map_file(path)?;
        let file = object::File::parse(&*data).map_err(|e| crate::SymbolError::Parse(shown, e))?;
        let sections = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .filter_map(|s| {
                let (offset, _) = s.file_range()?;
                Some(Section { address: s.address(), offset, bytes: s.data().ok()?.to_vec() })
            })
            .collect();
        Ok(Code::new(sections, symbols))
    }

    /// Code from its executable sections, with the function symbols at `symbols`.
    pub fn new(sections: Vec<Section>, symbols: &[u64]) -> Code {
        let mut entries: Vec<u64> = symbols.to_vec();
        let mut jumps = Vec::new();
        let mut starts: Vec<u64> = symbols.to_vec();
        starts.sort_unstable();
        for s in &sections {
            let (base, end) = (s.address, s.address + s.bytes.len() as u64);
            let mut cuts: Vec<u64> = starts.iter().copied().filter(|&a| base < a && a < end).collect();
            cuts.insert(0, base);
            cuts.push(end);
            for w in cuts.windows(2) {
                let chunk = &s.bytes[(w[0] - base) as usize..(w[1] - base) as usize];
                collect_entries(chunk, w[0], &mut entries, &mut jumps);
            }
        }
        entries.sort_unstable();
        entries.dedup();
        jumps.sort_unstable();
        Code { sections, entries, jumps }
    }

    fn section(&self, address: u64) -> Option<&Section> {
        self.sections.iter().find(|s| s.address <= address && address < s.address + s.bytes.len() as u64)
    }

    fn bytes(&self, address: u64, len: u64) -> Option<&[u8]> {
        let s = self.section(address)?;
        let to = (address + len.max(1)).min(s.address + s.bytes.len() as u64);
        Some(&s.bytes[(address - s.address) as usize..(to - s.address) as usize])
    }

    /// The file offset of the code at virtual `address`.
    fn file_offset(&self, address: u64) -> Option<u64> {
        self.section(address).map(|s| address - s.address + s.offset)
    }

    fn is_entry(&self, address: u64) -> bool {
        self.entries.binary_search(&address).is_ok()
    }

    /// Sources of the unconditional direct jumps to `address`.
    fn jumps_to(&self, address: u64) -> impl Iterator<Item = u64> + '_ {
        let first = self.jumps.partition_point(|&(t, _)| t < address);
        self.jumps[first..].iter().take_while(move |&&(t, _)| t == address).map(|&(_, s)| s)
    }

    /// Where to probe the function at `address` of `size` bytes (0: unknown, then only the entry can be
    /// proven) so that the probe runs exactly once per call and the function computes what it would
    /// without the probe.
    pub fn place(&self, address: u64, size: u64, needs: Needs) -> Placement {
        let Some(code) = self.bytes(address, if size > 0 { size } else { MAX_PREFIX_BYTES as u64 }) else {
            return Placement::Unsafe("its code is not in an executable section of the file".into());
        };
        let whole = size > 0 && code.len() as u64 == size;
        let movable = whole && self.provable(code, address);
        let inside = |s: u64| (address..address + size).contains(&s);
        // Jumps from the function back to its own entry re-run the prefix: Go's stack check branches to
        // `call runtime.morestack; jmp entry` (also taken when the scheduler asks to preempt), so a probe
        // before that branch would count the call twice.
        let restarts: Vec<u64> = self.jumps_to(address).filter(|&s| inside(s)).collect();
        let guard = if movable { self.restart_guard(code, address, &restarts) } else { None };
        let mut compensate: Vec<u64> = Vec::new();
        if guard.is_none() && needs.compensable() {
            // Without a guard to go past, each restart is one extra hit of any site in the prefix.
            compensate.extend(restarts.iter().filter_map(|&s| self.file_offset(s)));
        }
        let mut decoder =
            Decoder::with_ip(64, &code[..code.len().min(MAX_PREFIX_BYTES)], address, DecoderOptions::NONE);
        let mut info = InstructionInfoFactory::new();
        let mut stack: Option<i64> = Some(0);
        let mut written = Args::NONE;
        let mut first_safe: Option<Site> = None;
        let mut entry_problem: Option<String> = None;
        for k in 0..MAX_PREFIX_INSNS {
            if !decoder.can_decode() {
                break;
            }
            let insn = decoder.decode();
            if k > 0 && (!movable || self.is_entry(insn.ip())) {
                break;
            }
            let mut from_elsewhere = self.jumps_to(insn.ip()).peekable();
            if k > 0 && from_elsewhere.peek().is_some() {
                let offsets: Option<Vec<u64>> =
                    from_elsewhere.map(|s| (!inside(s)).then(|| self.file_offset(s)).flatten()).collect();
                match offsets {
                    Some(o) if needs.compensable() => compensate.extend(o),
                    _ => break,
                }
            }
            let fits = match needs.stack {
                StackNeed::Any => true,
                StackNeed::Known => stack.is_some(),
                StackNeed::Untouched => stack == Some(0),
            } && written.0 & needs.args.0 == 0;
            let restarted = guard.is_some_and(|g| insn.ip() < g);
            match classify(&insn) {
                // Runs again on every restart: not once per call.
                _ if restarted => {}
                Ok(execution) if fits => {
                    let site = Site {
                        address: insn.ip(),
                        moved: insn.ip() - address,
                        execution,
                        instruction: text(&insn),
                        stack_delta: stack.map_or(0, |s| (-s) as u32),
                        compensate: compensate.clone(),
                    };
                    if execution == Execution::Emulated || (k == 0 && needs.at_entry) {
                        return Placement::Site(site);
                    }
                    first_safe.get_or_insert(site);
                }
                Ok(_) => {}
                Err(why) if k == 0 => {
                    entry_problem = Some(format!("its first instruction ({}) {why}", text(&insn)))
                }
                Err(_) => {}
            }
            let to_guard = restarted && insn.next_ip() == guard.unwrap_or(0);
            if insn.is_invalid() || (insn.flow_control() != FlowControl::Next && !to_guard) {
                break;
            }
            let increment = insn.stack_pointer_increment();
            for r in info.info(&insn).used_registers() {
                let w = matches!(
                    r.access(),
                    OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
                );
                if !w {
                    continue;
                }
                let full = r.register().full_register();
                if full == Register::RSP && increment == 0 {
                    stack = stack.and_then(|s| explicit_stack_change(&insn).map(|d| s + d));
                } else {
                    written = written.with(Args::of(full));
                }
            }
            stack = stack.map(|s| s + i64::from(increment));
        }
        match first_safe {
            Some(site) => Placement::Site(site),
            None => {
                let problem =
                    entry_problem.unwrap_or_else(|| "its first instruction cannot be kept intact".into());
                let tail = if !movable {
                    "and the function cannot be proven to have a later site reached exactly once per call"
                } else {
                    "and no later instruction reached exactly once per call is safe"
                };
                Placement::Unsafe(format!("{problem}, {tail}"))
            }
        }
    }

    /// Where the code after a function's restart guard starts: the guard is the prefix's first branch,
    /// a conditional one whose target runs straight (calls return) into the function's only jump back to
    /// its entry. Past it, an instruction runs once per call however often the prefix restarts.
    fn restart_guard(&self, code: &[u8], address: u64, restarts: &[u64]) -> Option<u64> {
        let [restart] = restarts else { return None };
        let mut d = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
        let branch = (0..MAX_PREFIX_INSNS)
            .map(|_| d.decode())
            .find(|i| i.is_invalid() || i.flow_control() != FlowControl::Next)?;
        if branch.flow_control() != FlowControl::ConditionalBranch
            || branch.op0_kind() != OpKind::NearBranch64
        {
            return None;
        }
        let target = branch.near_branch_target();
        if !(address..address + code.len() as u64).contains(&target) {
            return None;
        }
        let tail = self.bytes(target, (address + code.len() as u64).checked_sub(target)?)?;
        let mut d = Decoder::with_ip(64, tail, target, DecoderOptions::NONE);
        let end = (0..MAX_PREFIX_INSNS)
            .map(|_| d.decode())
            .find(|i| i.is_invalid() || !matches!(i.flow_control(), FlowControl::Next | FlowControl::Call))?;
        let back = end.flow_control() == FlowControl::UnconditionalBranch
            && end.op0_kind() == OpKind::NearBranch64
            && end.near_branch_target() == address
            && end.ip() == *restart;
        back.then(|| branch.next_ip())
    }

    /// Whether every byte of the function decodes and no jump inside it goes to a computed address (a
    /// jump table could land anywhere). Jumps through a RIP-relative slot are tail calls via the GOT.
    fn provable(&self, code: &[u8], address: u64) -> bool {
        let mut d = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
        while d.can_decode() {
            let insn = d.decode();
            if insn.is_invalid() {
                return false;
            }
            if insn.flow_control() == FlowControl::IndirectBranch && !insn.is_ip_rel_memory_operand() {
                return false;
            }
        }
        true
    }
}

/// Adds every address that code in `chunk` can enter elsewhere at: (target, source) of unconditional
/// direct jumps to `jumps`; conditional branch and call targets and code addresses taken with `lea`
/// (function pointers, jump tables) to `entries`.
fn collect_entries(chunk: &[u8], address: u64, entries: &mut Vec<u64>, jumps: &mut Vec<(u64, u64)>) {
    let mut d = Decoder::with_ip(64, chunk, address, DecoderOptions::NONE);
    let mut insn = iced_x86::Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut insn);
        match insn.flow_control() {
            FlowControl::UnconditionalBranch if insn.op0_kind() == OpKind::NearBranch64 => {
                jumps.push((insn.near_branch_target(), insn.ip()))
            }
            FlowControl::ConditionalBranch | FlowControl::Call if insn.op0_kind() == OpKind::NearBranch64 => {
                entries.push(insn.near_branch_target())
            }
            _ if insn.mnemonic() == Mnemonic::Lea && insn.is_ip_rel_memory_operand() => {
                entries.push(insn.ip_rel_memory_address())
            }
            _ => {}
        }
    }
}

/// How the kernel would run a probe on `insn`, or why it must not be probed.
fn classify(insn: &iced_x86::Instruction) -> Result<Execution, &'static str> {
    if insn.is_invalid() {
        return Err("does not decode");
    }
    match insn.encoding() {
        EncodingKind::Legacy => {}
        EncodingKind::VEX => return Err("is AVX (VEX-encoded), which uprobes corrupt on this kernel"),
        EncodingKind::EVEX => return Err("is AVX-512 (EVEX-encoded), which uprobes corrupt on this kernel"),
        _ => return Err("is not legacy-encoded, which uprobes corrupt on this kernel"),
    }
    let operand_size_prefix = insn.op0_kind() == OpKind::NearBranch16;
    match insn.flow_control() {
        // The kernel refuses branches with a 16-bit operand override; loop and jrcxz it does not emulate.
        _ if operand_size_prefix || insn.is_loop() || insn.is_loopcc() || insn.is_jcx_short() => {
            Err("is a branch form uprobes do not support")
        }
        FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::Call
            if insn.is_jmp_short_or_near() || insn.is_jcc_short_or_near() || insn.is_call_near() =>
        {
            Ok(Execution::Emulated)
        }
        FlowControl::Next if matches!(insn.code(), Op::Push_r64) => Ok(Execution::Emulated),
        FlowControl::Next
            if matches!(
                insn.code(),
                Op::Nopw | Op::Nopd | Op::Nopq | Op::Nop_rm16 | Op::Nop_rm32 | Op::Nop_rm64
            ) =>
        {
            Ok(Execution::Emulated)
        }
        // A string instruction with a repeat prefix traps after every iteration when single-stepped.
        FlowControl::Next if insn.is_string_instruction() => Err("is a string instruction"),
        FlowControl::Next | FlowControl::Return | FlowControl::IndirectBranch | FlowControl::IndirectCall => {
            Ok(Execution::SingleStepped)
        }
        _ => Err("is a system instruction uprobes do not support"),
    }
}

/// The bytes `sub`/`add` with an immediate move the stack pointer by (`sub $0x10,%rsp` -> -16); None for
/// any other write to it (`and $-32,%rsp`, `mov %rbp,%rsp`), after which its position is unknown.
fn explicit_stack_change(insn: &iced_x86::Instruction) -> Option<i64> {
    if insn.op0_kind() != OpKind::Register || insn.op0_register() != Register::RSP {
        return None;
    }
    let imm = match insn.op1_kind() {
        OpKind::Immediate8to64 | OpKind::Immediate32to64 => insn.immediate(1) as i64,
        _ => return None,
    };
    match insn.mnemonic() {
        Mnemonic::Sub => Some(-imm),
        Mnemonic::Add => Some(imm),
        _ => None,
    }
}

fn text(insn: &iced_x86::Instruction) -> String {
    let mut f = GasFormatter::new();
    f.options_mut().set_uppercase_hex(false);
    f.options_mut().set_hex_prefix("0x");
    f.options_mut().set_hex_suffix("");
    f.options_mut().set_space_after_operand_separator(false);
    f.options_mut().set_branch_leading_zeros(false);
    let mut s = String::new();
    f.format(insn, &mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::{collect_entries, Args, Code, Execution, Needs, Placement, Section, Site, StackNeed};

    const BASE: u64 = 0x1000;

    /// Places a probe in a function made of `bytes` at BASE (the only symbol), with `needs`.
    fn place(bytes: &[u8], needs: Needs) -> Placement {
        Code::new(vec![section(BASE, bytes)], &[BASE]).place(BASE, bytes.len() as u64, needs)
    }

    fn section(address: u64, bytes: &[u8]) -> Section {
        Section { address, offset: address - 0x1000 + 0x200, bytes: bytes.to_vec() }
    }

    fn site(p: Placement) -> Site {
        match p {
            Placement::Site(s) => s,
            Placement::Unsafe(why) => panic!("expected a site, got: {why}"),
        }
    }

    // glibc's __memset_avx512_unaligned_erms: vpbroadcastb %esi,%zmm16; mov %rdi,%rax; cmp $0x40,%rdx; jb; ...
    const MEMSET_EVEX: &[u8] = &[
        0x62, 0xe2, 0x7d, 0x48, 0x7a, 0xc6, // vpbroadcastb %esi,%zmm16
        0x48, 0x89, 0xf8, // mov %rdi,%rax
        0x48, 0x83, 0xfa, 0x40, // cmp $0x40,%rdx
        0x72, 0x02, // jb +2
        0x90, 0x90, // nop; nop
        0xc3, // ret
    ];

    #[test]
    fn an_evex_entry_moves_to_the_first_emulated_instruction_after_it() {
        let s = site(place(MEMSET_EVEX, Needs::default()));
        assert_eq!((s.moved, s.execution), (13, Execution::Emulated));
        assert!(s.instruction.starts_with("jb"), "{}", s.instruction);
    }

    #[test]
    fn an_evex_entry_with_no_safe_site_after_it_is_refused_with_the_reason() {
        // The mov after it is a branch target (a loop back to entry+6): nothing after the entry is provable.
        let mut f = MEMSET_EVEX.to_vec();
        f.extend_from_slice(&[0xeb, 0x00]); // jmp back to entry+6: rel8 = 6 - (end of the jmp)
        *f.last_mut().unwrap() = (6 - f.len() as i64) as i8 as u8;
        match place(&f, Needs::default()) {
            Placement::Unsafe(why) => assert!(why.contains("AVX-512 (EVEX-encoded)"), "{why}"),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn a_push_entry_stays_where_it_is() {
        // push %r12; push %rbp; mov %rdi,%rbx; ret
        let s = site(place(&[0x41, 0x54, 0x55, 0x48, 0x89, 0xfb, 0xc3], Needs::default()));
        assert_eq!((s.moved, s.execution, s.stack_delta), (0, Execution::Emulated, 0));
    }

    #[test]
    fn cmp_then_jb_moves_to_the_jb_and_keeps_the_entry_if_the_return_address_must_stay_on_top() {
        // mov %rdi,%rax; cmp $0x20,%rdx; jb +0; ret
        let f = [0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x20, 0x72, 0x00, 0xc3];
        let s = site(place(&f, Needs::default()));
        assert_eq!((s.moved, s.execution), (7, Execution::Emulated));
        // With a stack change before the jb, a return probe cannot move there; the mov entry is single-stepped.
        // mov %rdi,%rax; sub $8,%rsp; cmp $0x20,%rdx; jb +0; ret
        let f = [0x48, 0x89, 0xf8, 0x48, 0x83, 0xec, 0x08, 0x48, 0x83, 0xfa, 0x20, 0x72, 0x00, 0xc3];
        let s = site(place(&f, Needs { stack: StackNeed::Untouched, ..Default::default() }));
        assert_eq!((s.moved, s.execution), (0, Execution::SingleStepped));
        // Where the return address only has to be found, the jb is fine: it is 8 bytes up.
        let s = site(place(&f, Needs { stack: StackNeed::Known, ..Default::default() }));
        assert_eq!((s.moved, s.execution, s.stack_delta), (11, Execution::Emulated, 8));
        // A push has not run when a probe on it fires: a return probe may sit on it.
        let f = [0x48, 0x89, 0xf8, 0x55, 0x48, 0x83, 0xfa, 0x20, 0x72, 0x00, 0xc3];
        let s = site(place(&f, Needs { stack: StackNeed::Untouched, ..Default::default() }));
        assert_eq!((s.moved, s.execution, s.stack_delta), (3, Execution::Emulated, 0));
    }

    #[test]
    fn a_site_after_pushes_and_sub_knows_where_the_return_address_is() {
        // vmovdqu %ymm0,(%rdi) [VEX]; push %rbx; sub $0x10,%rsp; jmp +0; ret
        let f = [0xc5, 0xfe, 0x7f, 0x07, 0x53, 0x48, 0x83, 0xec, 0x10, 0xeb, 0x00, 0xc3];
        let s = site(place(&f, Needs { stack: StackNeed::Known, ..Default::default() }));
        assert_eq!((s.moved, s.stack_delta), (4, 0), "the push is the first safe emulated site");
        // xor %edi,%edi; jmp +0: rdi is written before the jmp, so a probe reading it stays at the entry.
        let f = [0x31, 0xff, 0xeb, 0x00, 0xc3];
        let s = site(place(&f, Needs { args: Args::RDI, ..Default::default() }));
        assert_eq!((s.moved, s.execution), (0, Execution::SingleStepped));
        let s = site(place(&f, Needs::default()));
        assert_eq!((s.moved, s.execution), (2, Execution::Emulated));
        // After sub $0x18,%rsp the return address is 0x18 bytes up.
        let f = [0x48, 0x83, 0xec, 0x18, 0xeb, 0x00, 0xc3];
        let s = site(place(&f, Needs { stack: StackNeed::Known, ..Default::default() }));
        assert_eq!((s.moved, s.stack_delta), (4, 0x18));
    }

    #[test]
    fn a_loop_back_to_entry_plus_k_keeps_the_probe_before_k() {
        // mov %rdi,%rax (0); cmp $1,%rdx (3); jb +2 (7); dec %rdx (9); jmp -> 3 (12)
        let f = [0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x01, 0x72, 0x05, 0x48, 0xff, 0xca, 0xeb, 0xf5, 0xc3];
        let s = site(place(&f, Needs::default()));
        assert_eq!(s.moved, 0, "entry+3 is a loop head: the jb at +7 runs once per iteration");
    }

    #[test]
    fn another_function_jumping_into_the_prefix_is_subtracted_or_keeps_the_probe_at_the_entry() {
        // memmove: mov %rdi,%rax; (L: +3) cmp $0x20,%rdx; jb; ret. mempcpy elsewhere jumps to L.
        let memmove = [0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x20, 0x72, 0x00, 0xc3];
        let mempcpy_at = BASE + 0x100;
        // mempcpy: jmp rel32 to BASE+3
        let rel = (BASE + 3) as i64 - (mempcpy_at + 5) as i64;
        let mut mempcpy = vec![0xe9];
        mempcpy.extend_from_slice(&(rel as i32).to_le_bytes());
        let code =
            Code::new(vec![section(BASE, &memmove), section(mempcpy_at, &mempcpy)], &[BASE, mempcpy_at]);
        // Counting only: the probe moves to the jb, and mempcpy's jmp subtracts what it adds.
        let s = site(code.place(BASE, memmove.len() as u64, Needs::default()));
        assert_eq!((s.moved, s.execution), (7, Execution::Emulated));
        assert_eq!(s.compensate, vec![mempcpy_at - 0x1000 + 0x200], "the jmp's file offset");
        // A probe that samples each call's stack must not see mempcpy's calls: it stays at the entry.
        let s = site(code.place(BASE, memmove.len() as u64, Needs { per_call: true, ..Default::default() }));
        assert_eq!((s.moved, s.execution, s.compensate.len()), (0, Execution::SingleStepped, 0));
        // A conditional jump into the prefix cannot be made up for (the probe fires before it decides).
        let mut jcc = vec![0x0f, 0x84];
        jcc.extend_from_slice(&(((BASE + 3) as i64 - (mempcpy_at + 6) as i64) as i32).to_le_bytes());
        let code = Code::new(vec![section(BASE, &memmove), section(mempcpy_at, &jcc)], &[BASE, mempcpy_at]);
        let s = site(code.place(BASE, memmove.len() as u64, Needs::default()));
        assert_eq!(s.moved, 0);
    }

    /// Go's prologue: `cmp 0x10(%r14),%rsp; jbe grow; push %rbp; ...; grow: call morestack; jmp entry`.
    fn go_function(indirect_jump: bool) -> Vec<u8> {
        let mut f = vec![0x49, 0x3b, 0x66, 0x10, 0x76, 0x00, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        if indirect_jump {
            f.extend_from_slice(&[0xff, 0xe0]); // jmp *%rax
        }
        let grow = f.len();
        f[5] = (grow - 6) as u8;
        f.push(0xe8); // call BASE+0x100
        f.extend_from_slice(&((0x100 - (grow + 5)) as i32).to_le_bytes());
        f.extend_from_slice(&[0xeb, (-(grow as i64 + 7)) as i8 as u8]); // jmp BASE
        f
    }

    #[test]
    fn a_go_function_is_probed_past_its_stack_check_which_restarts_it() {
        let f = go_function(false);
        for needs in
            [Needs::default(), Needs { per_call: true, stack: StackNeed::Untouched, ..Default::default() }]
        {
            let s = site(place(&f, needs));
            assert_eq!((s.moved, s.instruction.as_str(), s.stack_delta), (6, "push %rbp", 0), "{needs:?}");
            assert!(s.compensate.is_empty());
        }
        // Not provable (a computed jump): the entry counts once more per restart, which its jmp subtracts.
        let f = go_function(true);
        let s = site(place(&f, Needs::default()));
        assert_eq!((s.moved, s.compensate), (0, vec![f.len() as u64 - 2 + 0x200]));
    }

    #[test]
    fn an_indirect_jump_in_the_function_makes_moving_unprovable() {
        // mov %rdi,%rax; cmp; jb +2; jmp *%rax; ret
        let f = [0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x20, 0x72, 0x02, 0xff, 0xe0, 0xc3];
        let s = site(place(&f, Needs::default()));
        assert_eq!(s.moved, 0);
        // The same with a VEX entry cannot be probed at all.
        let mut f2 = vec![0xc5, 0xfd, 0x6f, 0xc1]; // vmovdqa %ymm1,%ymm0
        f2.extend_from_slice(&f);
        match place(&f2, Needs::default()) {
            Placement::Unsafe(why) => {
                assert!(why.contains("AVX (VEX-encoded)") && why.contains("cannot be proven"), "{why}")
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn an_endbr64_entry_moves_to_the_push_after_it() {
        // endbr64; push %rbp; mov %rsp,%rbp; pop %rbp; ret
        let f = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        let s = site(place(&f, Needs::default()));
        assert_eq!((s.moved, s.execution, s.instruction.as_str()), (4, Execution::Emulated, "push %rbp"));
        let s = site(place(&f, Needs { at_entry: true, ..Default::default() }));
        assert_eq!((s.moved, s.instruction.as_str()), (0, "endbr64"), "asked to stay where it is safe");
        // A return probe may sit on the push too: the push has not run when the probe fires.
        let s = site(place(&f, Needs { stack: StackNeed::Untouched, ..Default::default() }));
        assert_eq!(s.moved, 4);
    }

    #[test]
    fn vex_opcodes_the_kernel_misreads_are_never_probed() {
        // vpbroadcastb (c4 e2 79 78 c0: opcode byte 78), vmovdqu store (c5 fe 7f 07), vpsubsb (c5 f9 e8 c1):
        // each followed by ret only, so there is nowhere else to go.
        for f in [
            &[0xc4, 0xe2, 0x79, 0x78, 0xc0, 0xc3][..],
            &[0xc5, 0xfe, 0x7f, 0x07, 0xc3],
            &[0xc5, 0xf9, 0xe8, 0xc1, 0xc3],
        ] {
            match place(f, Needs::default()) {
                Placement::Unsafe(why) => assert!(why.contains("VEX"), "{why}"),
                Placement::Site(s) => {
                    assert!(s.moved > 0 && s.instruction == "ret", "{f:02x?} probed at {s:?}")
                }
            }
        }
    }

    #[test]
    fn code_read_into_memory_across_a_4_gib_line_decodes() {
        // iced-x86 takes an instruction's length from the low 32 bits of two pointers: bytes that straddle
        // 0x1_0000_0000 in our address space must decode like any others (a debug build once panicked).
        const LINE: usize = 1 << 32;
        // SAFETY: an anonymous private mapping at a hint; MAP_FIXED_NOREPLACE never replaces a mapping,
        // and the result is checked before use and unmapped at the end.
        let page = unsafe {
            libc::mmap(
                (LINE - 4096) as *mut libc::c_void,
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(page as usize, LINE - 4096, "the page below 4 GiB is taken in this process");
        // SAFETY: the 8192 bytes were just mapped readable and writable, and nothing else refers to them.
        let bytes = unsafe { std::slice::from_raw_parts_mut(page as *mut u8, 8192) };
        bytes.fill(0x90); // nop
        bytes[4094..4099].copy_from_slice(&[0xe8, 0x10, 0, 0, 0]); // a call whose bytes cross the line
        let (mut entries, mut jumps) = (vec![], vec![]);
        collect_entries(&bytes[4000..4200], BASE, &mut entries, &mut jumps);
        // SAFETY: unmaps exactly the mapping made above; `bytes` is not used after this.
        unsafe { libc::munmap(page, 8192) };
        assert_eq!(entries, vec![BASE + 94 + 5 + 0x10]);
    }
}
