//! Java methods that HotSpot's interpreter runs, named from the JVM's own structures. The unwinder finds
//! each interpreted frame's `Method*` (the word the frame keeps it in); here it becomes the method's
//! name in the form the JVM's perf map gives compiled methods (`long JvmSplit.hotA(long, int)`), so a
//! method's interpreted and compiled frames are one function. Where the structures are comes from the
//! JVM's VM structure tables (read by the recorder, see [`MethodLayout`]); this reads only through the
//! memory handed to it.

/// Where a HotSpot JVM keeps a method's name: offsets of the fields on the way from a `Method` to the
/// symbols of its name, signature and class, as the JVM's `gHotSpotVMStructs` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodLayout {
    /// `Method::_constMethod`.
    pub method_const: u64,
    /// `ConstMethod::_constants`.
    pub const_constants: u64,
    /// `ConstMethod::_name_index` (u16).
    pub const_name_index: u64,
    /// `ConstMethod::_signature_index` (u16).
    pub const_signature_index: u64,
    /// `ConstantPool::_pool_holder`.
    pub pool_holder: u64,
    /// `ConstantPool::_length` (i32).
    pub pool_length: u64,
    /// `sizeof(ConstantPool)`: its entries follow it, a word each.
    pub pool_size: u64,
    /// `Klass::_name`.
    pub klass_name: u64,
    /// `Symbol::_length` (u16).
    pub symbol_length: u64,
    /// `Symbol::_body`.
    pub symbol_body: u64,
}

/// The name of the method at `method`, read with `read` (fills a buffer from an address; false where it
/// cannot): None where a read fails or what is read is no method (a word that was not a `Method*`).
pub fn method_name(
    layout: &MethodLayout,
    read: impl Fn(u64, &mut [u8]) -> bool,
    method: u64,
) -> Option<String> {
    let bytes = |addr: u64, n: usize| -> Option<Vec<u8>> {
        let mut b = vec![0; n];
        read(addr, &mut b).then_some(b)
    };
    let word = |addr: u64| Some(u64::from_le_bytes(bytes(addr, 8)?.try_into().ok()?));
    let half = |addr: u64| Some(u16::from_le_bytes(bytes(addr, 2)?.try_into().ok()?));
    let symbol = |sym: u64| -> Option<String> {
        let len = half(sym.checked_add(layout.symbol_length)?)?;
        String::from_utf8(bytes(sym.checked_add(layout.symbol_body)?, usize::from(len))?).ok()
    };
    if method == 0 || !method.is_multiple_of(8) {
        return None;
    }
    let cm = word(method.checked_add(layout.method_const)?)?;
    let cp = word(cm.checked_add(layout.const_constants)?)?;
    let (name_index, sig_index) = (
        half(cm.checked_add(layout.const_name_index)?)?,
        half(cm.checked_add(layout.const_signature_index)?)?,
    );
    let len = i32::from_le_bytes(bytes(cp.checked_add(layout.pool_length)?, 4)?.try_into().ok()?);
    if name_index == 0 || sig_index == 0 || i32::from(name_index.max(sig_index)) >= len {
        return None;
    }
    let entry = |i: u16| word(cp.checked_add(layout.pool_size)?.checked_add(u64::from(i) * 8)?);
    let name = symbol(entry(name_index)?)?;
    let (ret, params) = signature(&symbol(entry(sig_index)?)?)?;
    let class = symbol(word(word(cp.checked_add(layout.pool_holder)?)?.checked_add(layout.klass_name)?)?)?;
    let identifier = |s: &str| !s.is_empty() && !s.contains(['(', ')', ';', '[', '.']);
    if !identifier(&name) || class.is_empty() || class.contains(['(', ')', ';', '.']) {
        return None;
    }
    Some(format!("{ret} {}.{name}({})", class.replace('/', "."), params.join(", ")))
}

/// A method descriptor (`(J[Ljava/lang/String;)V`) as Java types: the return type and the parameters'.
pub fn signature(descriptor: &str) -> Option<(String, Vec<String>)> {
    let mut rest = descriptor.strip_prefix('(')?;
    let mut params = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix(')') {
            let (ret, tail) = java_type(after)?;
            return tail.is_empty().then_some((ret, params));
        }
        let (ty, after) = java_type(rest)?;
        params.push(ty);
        rest = after;
    }
}

/// The first type of a descriptor, as Java writes it, and what follows it.
fn java_type(d: &str) -> Option<(String, &str)> {
    let primitive = |c| {
        Some(match c {
            'B' => "byte",
            'C' => "char",
            'D' => "double",
            'F' => "float",
            'I' => "int",
            'J' => "long",
            'S' => "short",
            'Z' => "boolean",
            'V' => "void",
            _ => return None,
        })
    };
    let c = d.chars().next()?;
    match c {
        '[' => java_type(&d[1..]).map(|(t, r)| (t + "[]", r)),
        'L' => {
            let end = d.find(';')?;
            Some((d[1..end].replace('/', "."), &d[end + 1..]))
        }
        _ => Some((primitive(c)?.to_string(), &d[1..])),
    }
}

#[cfg(test)]
mod tests {
    use super::{method_name, signature, MethodLayout};
    use std::collections::HashMap;

    #[test]
    fn descriptors_read_as_java_writes_types() {
        let s = |d| signature(d).map(|(r, p)| format!("{r} ({})", p.join(", ")));
        assert_eq!(s("(JI)J").as_deref(), Some("long (long, int)"));
        assert_eq!(s("([Ljava/lang/String;)V").as_deref(), Some("void (java.lang.String[])"));
        assert_eq!(s("()[[B").as_deref(), Some("byte[][] ()"));
        assert_eq!(
            s("(Ljava/util/concurrent/ConcurrentHashMap$Node;Z)Ljava/lang/Object;").as_deref(),
            Some("java.lang.Object (java.util.concurrent.ConcurrentHashMap$Node, boolean)")
        );
        for bad in ["", "J", "(J", "(Q)V", "(Ljava/lang/String)V", "()VV", "(J)"] {
            assert_eq!(signature(bad), None, "{bad}");
        }
    }

    const LAYOUT: MethodLayout = MethodLayout {
        method_const: 8,
        const_constants: 8,
        const_name_index: 34,
        const_signature_index: 36,
        pool_holder: 24,
        pool_length: 68,
        pool_size: 80,
        klass_name: 16,
        symbol_length: 4,
        symbol_body: 6,
    };

    /// A JVM's memory: words, halves and symbols put at addresses.
    #[derive(Default)]
    struct Mem(HashMap<u64, u8>);

    impl Mem {
        fn put(&mut self, addr: u64, bytes: &[u8]) {
            for (i, &b) in bytes.iter().enumerate() {
                self.0.insert(addr + i as u64, b);
            }
        }
        fn symbol(&mut self, addr: u64, s: &str) {
            self.put(addr + LAYOUT.symbol_length, &(s.len() as u16).to_le_bytes());
            self.put(addr + LAYOUT.symbol_body, s.as_bytes());
        }
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            buf.iter_mut().enumerate().all(|(i, b)| self.0.get(&(addr + i as u64)).map(|&v| *b = v).is_some())
        }
    }

    /// A method of class JvmSplit, `hotA(long, int)` returning long: its name and signature are the
    /// constant pool's entries 5 and 9.
    fn jvm() -> Mem {
        let (method, cm, cp, klass): (u64, u64, u64, u64) = (0x1000, 0x2000, 0x3000, 0x4000);
        let mut m = Mem::default();
        m.put(method + LAYOUT.method_const, &cm.to_le_bytes());
        m.put(cm + LAYOUT.const_constants, &cp.to_le_bytes());
        m.put(cm + LAYOUT.const_name_index, &5u16.to_le_bytes());
        m.put(cm + LAYOUT.const_signature_index, &9u16.to_le_bytes());
        m.put(cp + LAYOUT.pool_holder, &klass.to_le_bytes());
        m.put(cp + LAYOUT.pool_length, &12i32.to_le_bytes());
        m.put(cp + LAYOUT.pool_size + 5 * 8, &0x5000u64.to_le_bytes());
        m.put(cp + LAYOUT.pool_size + 9 * 8, &0x5100u64.to_le_bytes());
        m.put(klass + LAYOUT.klass_name, &0x5200u64.to_le_bytes());
        m.symbol(0x5000, "hotA");
        m.symbol(0x5100, "(JI)J");
        m.symbol(0x5200, "JvmSplit");
        m
    }

    #[test]
    fn a_method_is_named_from_its_class_name_and_signature() {
        let m = jvm();
        let name = method_name(&LAYOUT, |a, b| m.read(a, b), 0x1000);
        assert_eq!(name.as_deref(), Some("long JvmSplit.hotA(long, int)"));
    }

    /// A word that is no `Method*` (unaligned, unreadable, an index past the pool, garbage names) is
    /// no name.
    #[test]
    fn words_that_are_no_method_are_no_name() {
        let m = jvm();
        for addr in [0, 0x1004, 0x9000] {
            assert_eq!(method_name(&LAYOUT, |a, b| m.read(a, b), addr), None, "{addr:x}");
        }
        let mut short = jvm();
        short.put(0x3000 + LAYOUT.pool_length, &9i32.to_le_bytes());
        assert_eq!(method_name(&LAYOUT, |a, b| short.read(a, b), 0x1000), None);
        let mut garbage = jvm();
        garbage.symbol(0x5000, "(x;");
        assert_eq!(method_name(&LAYOUT, |a, b| garbage.read(a, b), 0x1000), None);
    }
}
